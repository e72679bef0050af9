"""Ascend ``tf32_hc_prenorm_gemm``: the mixed kernel ``hc_prenorm_gemm.asc`` (HF32 cube product, squared
sums on the vector cores).

Entry point (the dispatch table's Ascend column; arguments validated by ``deep_gemm.einsum``, the
canonical arguments of ``deep_gemm.reference.hc_prenorm_gemm``)::

    hc_prenorm_gemm(a, b, d, sqr_sum, num_splits) -> None

``a`` BF16 ``[M, K]`` and ``b`` FP32 ``[N, K]`` K-major; ``d`` FP32 ``[M, N]`` (or ``[S, M, N]``), rows
contiguous; ``sqr_sum`` FP32 ``[M]`` (or ``[S, M]``) contiguous. Split ``i`` covers K columns
``[i * ceil(K / S), ...)``; splits past K (``S > ceil(K / ceil(K / S))``) have no columns and are
zero-filled here, the kernel runs the others. The products are HF32 (10 mantissa bits, like TF32).
"""
from __future__ import annotations

import torch

from ._launch import args, kernel, num_cube_cores

BLOCK_M, BLOCK_N = 128, 64  # the kernel's work item (hc_prenorm_gemm.asc)


def hc_prenorm_gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, sqr_sum: torch.Tensor,
                    num_splits: int | None) -> None:
    (m, k), n = a.shape, b.shape[0]
    splits = 1 if num_splits is None else num_splits
    split_k = -(-k // splits)
    busy = -(-k // split_k)  # splits with K columns
    d3 = d.unsqueeze(0) if num_splits is None else d
    s2 = sqr_sum.unsqueeze(0) if num_splits is None else sqr_sum
    if busy < splits:
        d3[busy:].zero_()
        s2[busy:].zero_()
    if m == 0:
        return
    items = busy * -(-m // BLOCK_M) * -(-n // BLOCK_N)
    kernel("dg_hc_prenorm_gemm", "ascend/hc_prenorm_gemm.asc", {})(min(items, num_cube_cores(d)), args(
        "DgHcPrenormGemmArgs", a=a, b=b, d=d, sqr_sum=sqr_sum, m=m, n=n, k=k, num_splits=busy, split_k=split_k,
        lda=a.stride(0), ldb=b.stride(0), ldd=d3.stride(1), d_split_stride=d3.stride(0),
        sqr_split_stride=s2.stride(0)))
