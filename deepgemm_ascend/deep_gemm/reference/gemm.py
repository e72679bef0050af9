"""Plain-PyTorch GEMMs on canonical operands: the semantics every other path must reproduce.

All products accumulate in FP32; a block-scaled operand is ``values * sf`` with each scale
broadcast over its ``gran_mn x gran_k`` block. Outputs are written into the caller's ``d``.
"""
from __future__ import annotations

import torch

from .. import formats


def decode_values(op) -> torch.Tensor:
    """FP8 or packed-FP4 data of a QuantOperand to FP32 ``[G?, MN, K]`` (no scaling)."""
    if not op.fp4:
        return op.data.float()
    if op.k_major:
        return formats.unpack_fp4(op.data)
    return formats.unpack_fp4(op.data.transpose(-1, -2)).transpose(-1, -2)


def expand_sf(sf: torch.Tensor, mn: int, k: int, gran_mn: int, gran_k: int) -> torch.Tensor:
    """Per-block scales ``[.., ceil(mn/gran_mn), ceil(k/gran_k)]`` to per-element ``[.., mn, k]``."""
    rows = torch.arange(mn, device=sf.device) // gran_mn
    cols = torch.arange(k, device=sf.device) // gran_k
    return sf.index_select(-2, rows).index_select(-1, cols)


def dequantize(op) -> torch.Tensor:
    return decode_values(op) * expand_sf(op.sf, op.mn, op.k, op.gran_mn, op.gran_k)


def write_output(d: torch.Tensor, acc: torch.Tensor, c: torch.Tensor | None, alpha: float | None) -> None:
    """``d = c + alpha * acc`` computed in FP32, rounded once to d's dtype."""
    if alpha is not None:
        acc = acc * alpha
    if c is not None:
        acc = acc + c.float()
    d.copy_(acc.to(d.dtype))


def fp8_fp4_gemm_nt(a, b, d: torch.Tensor, c: torch.Tensor | None = None, alpha: float | None = None) -> None:
    """``d = c + alpha * dequant(a) @ dequant(b).T`` for 2-D QuantOperands."""
    write_output(d, dequantize(a) @ dequantize(b).t(), c, alpha)


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None,
                 alpha: float | None = None) -> None:
    write_output(d, a.float() @ b.float().t(), c, alpha)


def _m_grouped(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, row_group: torch.Tensor, zero_padding: bool) -> None:
    out = torch.zeros(d.shape, dtype=torch.float32, device=d.device) if zero_padding else d.float()
    for g in torch.unique(row_group).tolist():
        if g >= 0:
            rows = (row_group == g).nonzero().flatten()
            out[rows] = a[rows] @ b[g].t()
    d.copy_(out.to(d.dtype))


def m_grouped_fp8_fp4_gemm_nt(a, b, d: torch.Tensor, rows, zero_padding: bool) -> None:
    """Row i of ``a`` (``[M, K]``) times ``b[rows.row_group[i]]`` (``b``: ``[G, N, K]``) into ``d[i]``.

    ``row_group[i] == -1`` marks a padding row: written as zero when ``zero_padding``, else left as is."""
    _m_grouped(dequantize(a), dequantize(b), d, rows.row_group, zero_padding)


def m_grouped_bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, rows, zero_padding: bool) -> None:
    _m_grouped(a.float(), b.float(), d, rows.row_group, zero_padding)


def _masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor) -> None:
    for g, m in enumerate(masked_m.tolist()):
        if m > 0:
            d[g, :m] = (a[g, :m] @ b[g].t()).to(d.dtype)


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d: torch.Tensor, masked_m: torch.Tensor) -> None:
    """``d[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g].T``; rows from ``masked_m[g]`` on are untouched."""
    _masked(dequantize(a), dequantize(b), d, masked_m)


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor) -> None:
    _masked(a.float(), b.float(), d, masked_m)


def _k_grouped(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor, groups) -> None:
    out = c.float().clone()
    for g, (s, e) in enumerate(groups.k_ranges):
        if e > s:
            out[g] += a[s:e].t() @ b[s:e]
    d.copy_(out.to(d.dtype))


def expand_k_grouped_sf(sf: torch.Tensor, k_total: int, groups, gran_k: int) -> torch.Tensor:
    """Per-group K-block scales (``[S, MN]``, group g's from row ``sf_starts[g]``) to per-row ``[k_total, MN]``.

    Rows outside every group get scale 0."""
    index = torch.full((k_total,), sf.size(0), dtype=torch.int64, device=sf.device)
    for (s, e), base in zip(groups.k_ranges, groups.sf_starts, strict=True):
        if e > s:
            index[s:e] = base + torch.arange(e - s, device=sf.device) // gran_k
    padded = torch.cat([sf.float(), torch.zeros((1, sf.size(1)), dtype=torch.float32, device=sf.device)])
    return padded[index]


def k_grouped_fp8_gemm_tn(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor, d: torch.Tensor,
                          c: torch.Tensor, groups, gran_k: int) -> None:
    """``d[g] = c[g] + deq(a)[s:e].T @ deq(b)[s:e]`` for each group's K rows ``[s, e)`` (``groups``: KGroups).

    ``a``: FP8 ``[K, M]``, ``b``: FP8 ``[K, N]``; ``sfa``/``sfb``: FP32 per-channel ``[S, M|N]``."""
    k_total = a.size(0)
    a_deq = a.float() * expand_k_grouped_sf(sfa, k_total, groups, gran_k)
    b_deq = b.float() * expand_k_grouped_sf(sfb, k_total, groups, gran_k)
    _k_grouped(a_deq, b_deq, d, c, groups)


def k_grouped_bf16_gemm_tn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor, groups) -> None:
    _k_grouped(a.float(), b.float(), d, c, groups)


def bf16_einsum(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None) -> None:
    write_output(d, torch.einsum(expr, a.float(), b.float()), c, None)


def fp8_bmm(a, b, d: torch.Tensor, c: torch.Tensor | None) -> None:
    """Batched ``d[i] = c[i] + dequant(a)[i] @ dequant(b)[i].T`` (``d``/``c`` may be permuted views)."""
    write_output(d, dequantize(a) @ dequantize(b).transpose(-1, -2), c, None)


def hc_prenorm_gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, sqr_sum: torch.Tensor,
                    num_splits: int | None) -> None:
    """``d = a @ b.T`` and ``sqr_sum = sum(a^2)`` in FP32, as split-K partials when ``num_splits`` is set."""
    af, bf = a.float(), b.float()
    if num_splits is None:
        d.copy_(af @ bf.t())
        sqr_sum.copy_((af * af).sum(-1))
        return
    k = a.size(1)
    chunk = -(-k // num_splits)
    for i in range(num_splits):
        s, e = min(k, i * chunk), min(k, (i + 1) * chunk)
        d[i] = af[:, s:e] @ bf[:, s:e].t()
        sqr_sum[i] = (af[:, s:e] * af[:, s:e]).sum(-1)
