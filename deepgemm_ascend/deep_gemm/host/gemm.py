"""GEMM entry points (dense, M-grouped contiguous and masked, K-grouped) over one packed engine."""
from __future__ import annotations

from typing import Optional, Sequence

import torch


def gemm(a: torch.Tensor, sfa: Optional[torch.Tensor], b: torch.Tensor, sfb: Optional[torch.Tensor],
         d: torch.Tensor, c: Optional[torch.Tensor] = None, alpha: float = 1.0,
         gran_a: tuple = (1, 128), gran_b: tuple = (128, 128), num_threads: Optional[int] = None) -> None:
    """``d = alpha * dequant(a) @ dequant(b).T + c``; a ``[M, K]``, b ``[N, K]``, d ``[M, N]``."""
    raise NotImplementedError


def m_grouped_gemm_contiguous(a, sfa, b, sfb, d, grouped_layout: torch.Tensor, use_psum_layout: bool = False,
                              alignment: int = 128, zero_padding: bool = True, gran_a: tuple = (1, 128),
                              gran_b: tuple = (128, 128), num_threads: Optional[int] = None) -> None:
    """Rows of a ``[M_sum, K]`` grouped by ``grouped_layout``; b ``[G, N, K]``; d ``[M_sum, N]``.

    ``use_psum_layout=False``: int32 ``m_indices[M_sum]``, group id per row, -1 for padding.
    ``use_psum_layout=True``: int32 ``[G]`` exclusive end rows; group g starts at
    ``align(psum[g-1], alignment)``. Padding / gap rows of d are zeroed when ``zero_padding``."""
    raise NotImplementedError


def m_grouped_gemm_masked(a, sfa, b, sfb, d, masked_m: torch.Tensor, gran_a: tuple = (1, 128),
                          gran_b: tuple = (128, 128), num_threads: Optional[int] = None) -> None:
    """a ``[G, M_max, K]``, b ``[G, N, K]``, d ``[G, M_max, N]``; rows ``>= masked_m[g]`` untouched."""
    raise NotImplementedError


def k_grouped_gemm(a, sfa, b, sfb, d, c, ks: Sequence[int], k_starts: Optional[Sequence[int]] = None,
                   sf_starts: Optional[Sequence[int]] = None, gran_k: int = 128,
                   num_threads: Optional[int] = None) -> None:
    """``d[g] = c[g] + a[kg].T @ b[kg]`` in FP32; a ``[sum_K, M]``, b ``[sum_K, N]``, d/c ``[G, M, N]``.

    Group g covers rows ``[k_starts[g], k_starts[g] + ks[g])`` (default: consecutive). Scales are
    per channel: ``sfa [S, M]``, ``sfb [S, N]`` with group g's K-blocks at rows ``sf_starts[g]...``
    (default: consecutive ``ceil(ks[g] / gran_k)`` rows); ``None`` for BF16."""
    raise NotImplementedError
