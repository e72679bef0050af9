"""Ascend M-grouped MX block-scaled GEMMs: ``m_grouped_bf16_gemm.asc`` with ``DG_MX`` (the cube part of
``mx_gemm.h``) behind ``m_grouped_fp8_fp4_gemm_{nt,nn}_contiguous`` (psum and ``m_indices`` layouts) and
``m_grouped_fp8_fp4_gemm_nt_masked``; FP8 x K-major FP4 runs ``m_grouped_fp8_fp4_mx_gemm.asc`` (the same
tile walk, B's FP4 widened into L1 by the blocks' vector cores: no widening launch).

Entry points (for the dispatch table's Ascend column; the canonical arguments of
``deep_gemm.reference.m_grouped_fp8_fp4_gemm_nt`` / ``..._nt_masked``, validated by ``deep_gemm.grouped``)::

    m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, rows, zero_padding, compiled_dims="nk") -> None
    m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, compiled_dims="nk") -> None

- Operand pairs, granularities, the scale layout and the mantissa rule are those of
  ``fp8_mx_gemm.py`` (FP8 x FP8, FP4 x FP4, FP8 x FP4 and FP4 x FP8 with the FP4 side widened to E4M3;
  gran_k 32 or 128); ``b`` may be MN-major (``nn``) when FP8.
- Contiguous: ``a`` ``[M, K]`` K-major, ``b`` ``[G, N, K]``, ``d`` ``[M, N]``; ``rows.layout`` psum
  end rows read by the kernel only; ``zero_padding`` as in ``m_grouped_bf16_gemm.py``. Scale rows of
  psum gaps are never loaded (they may be uninitialised), so the mantissa check skips them; choosing
  those rows reads the layout, so A's check runs only with ``DG_ASCEND_CHECKS=1`` (B's always, on the twin).
- ``m_indices`` (``use_psum_layout=False``): as in ``m_grouped_bf16_gemm.py``. The padding rows of a
  computed block are loaded (A data and scales) and only then zeroed or kept as computed rows.
- Forms outside ``fp8_mx_gemm.unsupported`` go to the reference through the table's ``accepts``.
- Masked: ``a`` ``[G, M_max, K]``, ``d`` ``[G, M_max, N]``; ``masked_m`` read by the kernel only.
"""
from __future__ import annotations

import torch

from ._launch import m_blocks, n_blocks, shape_defines
from .fp8_mx_gemm import fused_fp4_operand, layout, mx_scales, operands
from .m_grouped_bf16_gemm import ENTRY, contiguous_layout, launch

FUSED_ENTRY = ("dg_m_grouped_fp8_fp4_mx_gemm", "ascend/m_grouped_fp8_fp4_mx_gemm.asc")


def _prepare(a, b, a_rows=None):
    """(data a, data b, sfa, sfb, ldb, defines, kernel entry); ``a_rows`` (bool ``[M]``, or a function making it)
    limits A's mantissa check. FP8 x K-major FP4: the fused kernel, B packed (its vector cores widen it into L1); other mixed
    pairs have their FP4 side widened first."""
    sfa, sfb = mx_scales("a[1]", a, a_rows), mx_scales("b[1]", b)
    sf_defines = {**sfa.defines("A"), **sfb.defines("B")}
    if fused_fp4_operand(a, b) == 2:
        db = b.data.view(torch.uint8)
        return a.data, db, sfa, sfb, db.stride(-2), sf_defines, FUSED_ENTRY
    da, db, fp4 = operands(a, b)
    b_mn, ldb = layout(db)
    defines = {"DG_MX": 1, "DG_AB_FP4": int(fp4), "DG_B_MN_MAJOR": int(b_mn), **sf_defines}
    return da, db, sfa, sfb, ldb, defines, ENTRY


def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d: torch.Tensor, rows, zero_padding: bool,
                                         compiled_dims: str = "nk") -> None:
    m, n, k, g = a.mn, b.mn, a.k, b.groups
    if m == 0 or n == 0:
        return
    layout, layout_defines, m_tiles = contiguous_layout(rows, m, d.device)
    da, db, sfa, sfb, ldb, defines, entry = _prepare(a, b, lambda: rows.row_group >= 0)
    defines.update({"DG_D_FP32": int(d.dtype == torch.float32), "DG_ZERO_PADDING": int(zero_padding),
                    **layout_defines, **shape_defines(compiled_dims, n=n, k=k)})
    launch(da, db, d, layout, m, n, k, g, rows.alignment,
           {"lda": da.stride(0), "ldb": ldb, "b_group": db.stride(0), "ldd": d.stride(0), "ld_sfa": sfa.ld,
            "ld_sfb": sfb.ld, "sfb_group": sfb.group},
           defines, m_tiles * n_blocks(n), sfa.t, sfb.t, entry)


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d: torch.Tensor, masked_m: torch.Tensor, compiled_dims: str = "nk") -> None:
    g, m, n, k = a.groups, a.mn, b.mn, a.k
    if min(g, m, n, k) == 0:
        return
    da, db, sfa, sfb, ldb, defines, entry = _prepare(a, b)
    defines.update({"DG_MASKED": 1, "DG_D_FP32": int(d.dtype == torch.float32),
                    **shape_defines(compiled_dims, n=n, k=k)})
    launch(da, db, d, masked_m, m, n, k, g, 1,
           {"lda": da.stride(1), "ldb": ldb, "b_group": db.stride(0), "ldd": d.stride(1), "a_group": da.stride(0),
            "d_group": d.stride(0), "ld_sfa": sfa.ld, "ld_sfb": sfb.ld, "sfa_group": sfa.group,
            "sfb_group": sfb.group},
           defines, g * m_blocks(m) * n_blocks(n), sfa.t, sfb.t, entry)
