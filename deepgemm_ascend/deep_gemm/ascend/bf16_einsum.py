"""Ascend BF16 ``einsum``: every expression of ``deep_gemm.einsum.BF16_EXPRS`` as one batched cube GEMM
(``bf16_einsum.asc``) over views of the einsum's tensors at their strides.

Entry point (the dispatch table's Ascend column; arguments validated by ``deep_gemm.einsum``: sizes
agree, every tensor's last dim contiguous, ``c`` is ``d`` (FP32) or None)::

    bf16_einsum(expr, a, b, d, c) -> None

Each expression is ``D[g] (+)= sum_r A[g, r] . B[g, r]^T`` with A ``[M, K]`` and B ``[N, K]`` views:

- ``bhr,hdr->bhd``: g = h; A = a[:, h] (K-major), B = b[h] (K-major), D = d[:, h].
- ``bhd,hdr->bhr``: g = h; A = a[:, h] (K-major), B = b[h] read as ``[R, D]`` (MN-major), D = d[:, h].
- ``bhd,bhr->hdr``: g = h, K = b; A = a[:, h] read as ``[D, B]``, B = b[:, h] as ``[R, B]`` (both
  MN-major), D = d[h].
- ``bmk,bnk->mn``: one batch, r = b summed in L0C: A = a[b], B = b[b] (K-major), D = d.

With ``c`` (``c is d``) the FixPipe store adds to D; without, D is overwritten (rounded once to its dtype).
"""
from __future__ import annotations

import torch

from ._launch import args, kernel, m_blocks, n_blocks, num_cube_cores


def _mn_major(view: torch.Tensor) -> tuple[bool, int]:
    """(MN-major, stride of the non-unit dimension) of an ``[MN, K]`` view whose last dim or first dim
    is contiguous (a size-1 dim counts as either)."""
    if view.stride(-1) == 1 or view.size(-1) == 1:
        return False, max(view.stride(0), 1)
    return True, max(view.stride(1), 1)


def _views(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor):
    """(A, B, D) as ``[G, R, MN, K]`` / ``[G, M, N]`` views (G batches, R summed)."""
    if expr == "bmk,bnk->mn":
        return a.unsqueeze(0), b.unsqueeze(0), d.unsqueeze(0)
    if expr == "bhr,hdr->bhd":
        return a.transpose(0, 1).unsqueeze(1), b.unsqueeze(1), d.transpose(0, 1)
    if expr == "bhd,hdr->bhr":
        return a.transpose(0, 1).unsqueeze(1), b.transpose(1, 2).unsqueeze(1), d.transpose(0, 1)
    # bhd,bhr->hdr
    return a.permute(1, 2, 0).unsqueeze(1), b.permute(1, 2, 0).unsqueeze(1), d


def bf16_einsum(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None) -> None:
    va, vb, vd = _views(expr, a, b, d)
    groups, k_batches, m, k = va.shape
    n = vb.shape[2]
    if m == 0 or n == 0 or groups == 0:
        return
    if k == 0 or k_batches == 0:  # an empty sum: D = C (nothing to add) or zeros
        if c is None:
            d.zero_()
        return
    (a_mn, lda), (b_mn, ldb) = _mn_major(va[0, 0]), _mn_major(vb[0, 0])
    defines = {"DG_A_MN_MAJOR": int(a_mn), "DG_B_MN_MAJOR": int(b_mn), "DG_D_FP32": int(d.dtype == torch.float32),
               "DG_ACCUMULATE": int(c is not None)}
    grid = min(groups * m_blocks(m) * n_blocks(n), num_cube_cores(d))
    kernel("dg_bf16_einsum", "ascend/bf16_einsum.asc", defines)(grid, args(
        "DgBf16EinsumArgs", a=a, b=b, d=d, batches=groups, k_batches=k_batches, m=m, n=n, k=k, lda=lda, ldb=ldb,
        ldd=vd.stride(1), a_batch_stride=va.stride(0), b_batch_stride=vb.stride(0), d_batch_stride=vd.stride(0),
        a_k_batch_stride=va.stride(1), b_k_batch_stride=vb.stride(1)))
