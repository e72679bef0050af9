"""Ascend K-grouped contiguous BF16 GEMM (MoE weight gradient): the mixed kernel behind
``k_grouped_bf16_gemm_tn_contiguous``.

Entry point (for the dispatch table's Ascend column; the canonical arguments of
``deep_gemm.reference.k_grouped_bf16_gemm_tn``, already validated by ``deep_gemm.k_grouped``)::

    k_grouped_bf16_gemm_tn_contiguous(a, b, d, c, groups, compiled_dims="mn") -> None

- ``a`` ``[sum_K, M]`` and ``b`` ``[sum_K, N]`` BF16 (MN-major); ``d`` and ``c`` ``[G, M, N]`` FP32,
  ``c`` may be ``d`` (the public wrapper passes ``c = d`` after copying): for each group
  ``d[g] = c[g] + a[s:e].T @ b[s:e]`` over its K rows ``[s, e)`` from ``groups`` (``KGroups``: host
  lists from ``ks_cpu``, or device tensors derived from a psum ``grouped_layout``; the kernel's
  ``(start, rows)`` table is built with tensor ops, no device value is read on the host).
- One launch of ``bf16_gemm_epilogue.asc`` with ``DG_K_GROUPED``: tiles over (group, M block,
  N block), each group's K loop over its own rows, ``c`` added on the vector cores. A group with no
  K rows has no cube work: ``d[g] = c[g]`` is copied by the kernel's vector cores when ``c`` is not ``d``.
- ``compiled_dims`` may bake M and N into the kernel; K differs per group and stays a run-time value.
"""
from __future__ import annotations

import torch

from ._launch import args, kernel, m_blocks, n_blocks, num_cube_cores, shape_defines
from .bf16_gemm import _operand


def k_grouped_bf16_gemm_tn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor, groups,
                                      compiled_dims: str = "mn") -> None:
    g, m, n = d.shape
    if g == 0 or m == 0 or n == 0:
        return
    if groups.on_host and not any(groups.ks) and c.data_ptr() == d.data_ptr():
        return
    at, bt = a.t(), b.t()  # the [M, K] / [N, K] operand views the nt core reads
    a_mn, lda = _operand(at)
    b_mn, ldb = _operand(bt)
    defines = {"DG_A_MN_MAJOR": int(a_mn), "DG_B_MN_MAJOR": int(b_mn), "DG_D_FP32": 1, "DG_HAS_C": 1,
               "DG_K_GROUPED": 1, **shape_defines(compiled_dims.replace("k", ""), m=m, n=n)}
    ks, k_starts, _ = groups.tensors(d.device)
    k_groups = torch.stack([k_starts, ks], 1).to(torch.int32)  # (start, rows) per group, read by the kernel
    grid = min(g * m_blocks(m) * n_blocks(n), num_cube_cores(d))
    kernel("dg_bf16_gemm_epilogue", "ascend/bf16_gemm_epilogue.asc", defines)(
        grid, args("DgBf16GemmEpilogueArgs", a=at, b=bt, d=d, c=c, k_groups=k_groups, num_groups=g, m=m, n=n,
                   k=a.size(0), lda=lda, ldb=ldb, ldd=d.stride(1), ldc=c.stride(1), d_group_stride=d.stride(0),
                   c_group_stride=c.stride(0), alpha=1.0, sfa=d, sfb=d, ld_sfa=0, ld_sfb=0))  # no MX scales
