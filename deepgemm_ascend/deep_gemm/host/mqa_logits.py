"""MQA logits (DeepSeek lightning indexer) entry points."""
from __future__ import annotations

from typing import Optional

import torch


def mqa_logits(q: torch.Tensor, q_sf: Optional[torch.Tensor], kv: torch.Tensor, kv_sf: torch.Tensor,
               weights: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor, logits: torch.Tensor,
               compressed: bool = False, clean_logits: bool = True, num_threads: Optional[int] = None) -> None:
    """``logits[i, j] = sum_h weights[i, h] * relu(q[i, h] . kv[j] * kv_sf[j])`` for j in ``[ks[i], ke[i])``.

    q ``[S, H, D]`` FP8 (``q_sf=None``) or FP4 ``[S, H, D/2]`` with FP32 ``q_sf [S, H, D/32]``;
    kv ``[S_kv, D]`` FP8 with FP32 ``kv_sf [S_kv]`` or FP4 ``[S_kv, D/2]`` with ``kv_sf [S_kv, D/32]``;
    weights ``[S, H]`` FP32; ks/ke int32 ``[S]``; logits ``[S, W]`` FP32 or BF16 (row stride free).
    Uncompressed: column j is KV position j, columns outside the range are -inf when
    ``clean_logits``. Compressed: column t is KV position ``ks[i] + t``, only ``t < ke-ks`` written."""
    raise NotImplementedError


def paged_mqa_logits(q, q_sf, kv_cache: torch.Tensor, weights, context_lens: torch.Tensor,
                     block_table: torch.Tensor, logits: torch.Tensor, clean_logits: bool = False,
                     num_threads: Optional[int] = None) -> None:
    """Paged decode variant: q ``[B, next_n, H, D]`` (FP8) or FP4 ``[B, next_n, H, D/2]`` + ``q_sf``;
    kv_cache uint8 ``[num_blocks, block_kv, 1, D + 4]`` (FP8: values then FP32 scales per page) or
    ``[..., D/2 + 4]`` (FP4: values then packed UE8M0 int32 per token); weights ``[B*next_n, H]``;
    context_lens int32 ``[B, next_n]``; block_table int32 ``[B, max_blocks]``; logits
    ``[B*next_n, W]``: row (b, t) gets positions ``[0, context_lens[b, t])``; the rest is -inf when
    ``clean_logits``, else untouched."""
    raise NotImplementedError
