"""Ascend row permutation within groups: the vector kernel ``permute_rows.asc`` behind the
``permute_rows`` op (deep_gemm.mega's weight transforms) on NPU tensors, or on the twin with
``DG_BACKEND=ascend``.

Entry point::

    permute_rows(t, perm) -> torch.Tensor

- ``t``: ``[G, N, ...]`` of any dtype; ``perm``: int64 ``[N]`` (host or device). Returns a new dense
  tensor with ``out[g, i] = t[g, perm[i]]``; the kernel clamps each entry of ``perm`` into ``[0, N)``
  (no host read of ``perm``).
"""
from __future__ import annotations

import torch

from .. import runtime
from .._lib import LIB
from ._launch import args, kernel, on_twin

WORDS_PER_BLOCK = 4096  # output words one vector core takes before the grid grows


def _word_bytes(row_bytes: int, *tensors: torch.Tensor) -> int:
    """The widest lane word that divides the row and both base addresses."""
    for size in (8, 4, 2):
        if row_bytes % size == 0 and all(t.data_ptr() % size == 0 for t in tensors):
            return size
    return 1


def accepts(t: torch.Tensor, perm: torch.Tensor) -> bool:
    """One integer entry per row of a ``[G, N, ...]`` tensor: the kernel reads ``perm[i]`` for every row."""
    return (t.dim() >= 2 and perm.dim() == 1 and perm.numel() == t.size(1)
            and not perm.dtype.is_floating_point and not perm.dtype.is_complex and perm.dtype != torch.bool)


def permute_rows(t: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    src = t.contiguous()
    out = torch.empty_like(src, memory_format=torch.contiguous_format)
    groups, rows = src.shape[:2]
    if out.numel() == 0:
        return out
    row_bytes = src[0, 0].numel() * src.element_size()
    word = _word_bytes(row_bytes, src, out)
    total = groups * rows * (row_bytes // word)
    device = LIB.ascend_runtime(on_twin(src)).device
    vec_per_core = device.get_num_vec_cores() // device.get_num_aicore_cores()
    grid = min(-(-total // WORDS_PER_BLOCK), vec_per_core * runtime.ascend_blocks(device.get_num_aicore_cores()))
    index = perm.to(device=src.device, dtype=torch.int64).contiguous()
    kernel("dg_permute_rows", "ascend/permute_rows.asc", {"DG_WORD_BYTES": word})(
        grid, args("DgPermuteRowsArgs", src=src, out=out, perm=index, groups=groups, rows=rows,
                   row_words=row_bytes // word))
    return out
