"""Head-batched einsums of MLA's absorbed form as one masked grouped GEMM launch (heads are the
groups, every row valid), on the strided views of the caller's tensors: nothing is copied.

BF16: ``bhr,hdr->bhd`` (A ``[B,H,R]`` -> per head ``[B,R]``, B ``[H,D,R]`` K-major) and
``bhd,hdr->bhr`` (B read as ``[H,R,D]``, MN-major, packed by the engine). FP8: any batched
``(batch, m, k) x (batch, n, k) -> (batch, m, n)`` view with block scales (fp8_einsum's three
forms after permutation), with ``c`` accumulated in FP32."""
from __future__ import annotations

import torch

from .gemm import m_grouped_gemm_masked

BF16_EXPRS = ("bhr,hdr->bhd", "bhd,hdr->bhr")


def bf16_einsum(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, num_threads: int | None = None) -> None:
    """``d = einsum(expr, a, b)`` for ``expr`` in ``BF16_EXPRS``; BF16 operands, BF16 ``d``."""
    if expr not in BF16_EXPRS:
        raise ValueError(f"expr: expected one of {BF16_EXPRS}, got {expr!r}")
    heads, batch = a.size(1), a.size(0)
    bt = b if expr == "bhr,hdr->bhd" else b.transpose(1, 2)
    masked = torch.full((heads,), batch, dtype=torch.int32)
    m_grouped_gemm_masked(a.transpose(0, 1), None, bt, None, d.transpose(0, 1), masked, num_threads=num_threads)


def fp8_bmm(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor, d: torch.Tensor,
            c: torch.Tensor | None, gran_a: tuple, gran_b: tuple, num_threads: int | None = None) -> None:
    """Batched ``d[i] = c[i] + dequant(a)[i] @ dequant(b)[i].T`` over ``[batch, m, k]`` / ``[batch, n, k]``
    views with FP32 scales ``[batch, ceil(mn/g0), ceil(k/g1)]``; ``c`` may be ``d``."""
    batch, m = d.shape[:2]
    masked = torch.full((batch,), m, dtype=torch.int32)
    m_grouped_gemm_masked(a, sfa, b, sfb, d, masked, gran_a=gran_a, gran_b=gran_b, c=c, num_threads=num_threads)
