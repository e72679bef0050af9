"""Ascend paged MQA logits schedule: the vector kernel ``paged_mqa_metadata.asc`` behind
``get_paged_mqa_logits_metadata`` on the Ascend path (NPU tensors, or ``DG_BACKEND=ascend`` on the twin).

Entry point (arguments validated by ``deep_gemm.attention`` from shapes and dtypes only)::

    paged_mqa_metadata(context_lens, indices, num_sms) -> torch.Tensor

- ``context_lens``: contiguous int32 ``[B, next_n]`` or ``[B]``; ``indices``: contiguous int32 ``[B]``
  (varlen runs, with ``[B, 1]`` lengths) or None. Returns int32 ``[num_sms + 1, 2]`` written by the
  kernel (no host read of either input); negative lengths count as 0.
"""
from __future__ import annotations

import torch

from ._launch import args, kernel


def paged_mqa_metadata(context_lens: torch.Tensor, indices: torch.Tensor | None, num_sms: int) -> torch.Tensor:
    out = torch.empty(num_sms + 1, 2, dtype=torch.int32, device=context_lens.device)
    grouping = 2 if indices is not None else (1 if context_lens.dim() == 2 else 0)
    kernel("dg_paged_mqa_metadata", "ascend/paged_mqa_metadata.asc", {"DG_META_GROUPING": grouping})(
        1, args("DgPagedMqaMetadataArgs", context_lens=context_lens, out=out,
                indices=indices if indices is not None else context_lens, rows=context_lens.numel(),
                next_n=context_lens.size(1) if context_lens.dim() == 2 else 1, num_sms=num_sms))
    return out
