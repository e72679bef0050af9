"""Ascend M-grouped contiguous BF16 GEMM (psum layout): the cube kernel behind
``m_grouped_bf16_gemm_{nt,nn}_contiguous``.

Entry point (for the dispatch table's Ascend column; the canonical arguments of
``deep_gemm.reference.m_grouped_bf16_gemm_nt``, already validated by ``deep_gemm.grouped``)::

    m_grouped_bf16_gemm_nt_contiguous(a, b, d, rows, zero_padding, compiled_dims="nk") -> None

- ``a`` ``[M, K]`` BF16 K-major; ``b`` ``[G, N, K]`` BF16, K-major or MN-major (``nn`` passes
  ``b.transpose(1, 2)``); ``d`` ``[M, N]`` BF16 or FP32, row-major, written in place.
- ``rows`` a ``GroupedRows`` with ``use_psum_layout=True``: ``rows.layout`` int32 ``[G]`` exclusive
  end rows (device memory, read by the kernel, never by the host), ``rows.alignment`` the group
  start alignment. ``D[rows of g] = A[rows of g] @ B[g].T`` with FP32 accumulation; zero-sized
  groups are skipped in the kernel.
- ``zero_padding`` (``ensure_zero_padding``): rows outside every group are zero (D is cleared before
  the kernel, as DeepGEMM-Ascend does); otherwise they keep what they held.
- The ``m_indices`` form (``use_psum_layout=False``) has no Ascend kernel: this raises
  ``NotImplementedError`` before touching anything.
"""
from __future__ import annotations

import torch

from ._launch import kernel, m_blocks, n_blocks, num_cube_cores, shape_defines


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, rows, zero_padding: bool,
                                      compiled_dims: str = "nk") -> None:
    if not rows.use_psum_layout:
        raise NotImplementedError("m_grouped_bf16_gemm_*_contiguous on Ascend: only the psum layout has a kernel")
    m, k = a.shape
    g, n, _ = b.shape
    if m == 0 or n == 0:
        return
    if zero_padding:
        d.zero_()
    if k == 0 or g == 0:
        if not zero_padding:
            d.masked_fill_((rows.row_group >= 0)[:, None], 0)
        return
    b_mn = b.stride(-1) != 1
    ldb = b.stride(-1) if b_mn else b.stride(-2)
    defines = {"DG_B_MN_MAJOR": int(b_mn), "DG_D_FP32": int(d.dtype == torch.float32),
               **shape_defines(compiled_dims, n=n, k=k)}
    # an upper bound on the tile count that needs no look at the layout's values
    tiles = (m_blocks(m) + g) * n_blocks(n)
    ends = rows.layout.to(device=d.device, dtype=torch.int32).contiguous()
    kernel("dg_m_grouped_bf16_gemm", "ascend/m_grouped_bf16_gemm.asc", defines)(
        min(tiles, num_cube_cores(d)), a, b, d, ends, m, n, k, g, rows.alignment, a.stride(0), ldb, b.stride(0),
        d.stride(0))
