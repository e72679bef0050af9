"""Ascend ``fp8_einsum``: its three expressions as a batched MX block-scaled GEMM, the masked form of
``m_grouped_bf16_gemm.asc`` (``DG_MX``, ``DG_MASKED``) with every batch full.

Entry point (the dispatch table's Ascend column for ``fp8_bmm``; the canonical arguments of
``deep_gemm.reference.fp8_bmm`` built by ``deep_gemm.einsum.fp8_einsum``)::

    fp8_bmm(a, b, d, c) -> None

``a`` / ``b`` are QuantOperands over ``[G, MN, K]`` views of the einsum's tensors (K-major or MN-major:
``bhd,bhr->hdr`` reads both MN-major), ``d`` the ``[G, M, N]`` view of the output. Scales follow the recipe
(any M/N granularity, K granularity 32 or 128) and must be powers of two (UE8M0, the Ascend MX contract;
checked on the twin's CPU tensors). With ``c`` the FixPipe store adds the products onto an FP32 tensor
that starts as ``c``: ``d`` itself where ``d`` is FP32, else an FP32 copy of ``c`` that is then rounded
into the BF16 ``d`` once (``bf16(c + a b)``, the reference's single rounding).
"""
from __future__ import annotations

import functools

import torch

from ._launch import m_blocks, n_blocks
from .fp8_mx_gemm import layout, prepare, unsupported
from .m_grouped_bf16_gemm import launch


@functools.lru_cache(maxsize=64)
def _full_batches(g: int, m: int, device: torch.device) -> torch.Tensor:
    """The masked form's row counts with every batch full: made once per shape and device (read only by the
    kernel), so a call is its launch alone."""
    return torch.full((g,), m, dtype=torch.int32, device=device)


def accepts(a, b, d: torch.Tensor, c: torch.Tensor | None) -> bool:
    return not (a.fp4 or b.fp4 or not a.has_sf or not b.has_sf or unsupported(a, b) is not None)


def fp8_bmm(a, b, d: torch.Tensor, c: torch.Tensor | None) -> None:
    g, m, n, k = a.groups, a.mn, b.mn, a.k
    if min(g, m, n) == 0:
        return
    if c is not None and d.dtype != torch.float32:
        # BF16 d: the sum is formed in FP32 and rounded once, as the reference does (a BF16 atomic add
        # onto c would round c and the product separately)
        acc = torch.empty((g, m, n), dtype=torch.float32, device=d.device)
        acc.copy_(c)
        fp8_bmm(a, b, acc, acc)
        d.copy_(acc)
        return
    if c is not None and c.data_ptr() != d.data_ptr():
        d.copy_(c)  # a separate c: d starts as c and the products accumulate onto it in the FixPipe store
    if k == 0:  # an empty sum: d = c or zeros
        if c is None:
            d.zero_()
        return
    da, db, sfa, sfb, defines = prepare(a, b)
    defines.update({"DG_MX": 1, "DG_MASKED": 1, "DG_D_FP32": int(d.dtype == torch.float32),
                    "DG_ACCUMULATE": int(c is not None)})
    launch(da, db, d, _full_batches(g, m, d.device), m, n, k, g, 1,
           {"lda": layout(da)[1], "ldb": layout(db)[1], "b_group": db.stride(0), "ldd": d.stride(1),
            "a_group": da.stride(0), "d_group": d.stride(0), "ld_sfa": sfa.ld, "ld_sfb": sfb.ld,
            "sfa_group": sfa.group, "sfb_group": sfb.group},
           defines, g * m_blocks(m) * n_blocks(n), sfa.t, sfb.t)
