"""Ascend MX block-scaled FP8 GEMM: the cube kernel (``fp8_mx_gemm.asc``, ``asc_mmad_mx``) behind
``fp8_fp4_gemm_nt`` (and the nn/tn/tt views) for FP8 x FP8 with recipe ``(1, 1, 32)``.

Entry point (for the dispatch table's Ascend column; the canonical arguments of
``deep_gemm.reference.fp8_fp4_gemm_nt``, already validated by ``deep_gemm.gemm``)::

    fp8_gemm_nt(a, b, d, c=None, alpha=None, compiled_dims="nk") -> None

- ``a``, ``b``: ``QuantOperand`` with E4M3 ``data`` ``[M, K]`` / ``[N, K]``, K-major, and FP32 ``sf``
  ``[MN, ceil(K / 32)]`` (``gran_mn == 1``, ``gran_k == 32``) whose values are powers of two (the
  Ascend contract; validated upstream). ``d`` ``[M, N]`` FP32 or BF16, written in place.
- The scales are re-packed on the device (no host read) into the Ascend layout the kernel reads:
  UE8M0 exponents, two per int16 (K elements ``[64p, 64p + 32)`` in the low byte), ``[MN, ceil(K/64)]``.
- Not served here, raising ``NotImplementedError`` before anything is written: FP4 operands,
  MN-major operands, other granularities, ``c`` and ``alpha`` (they need the vector epilogue of
  ``bf16_gemm_epilogue.asc`` in an FP8 form, a later step).
"""
from __future__ import annotations

import torch

from ._launch import kernel, m_blocks, n_blocks, num_cube_cores, shape_defines

E8M0_ONE = 127


def ascend_scales(sf: torch.Tensor) -> torch.Tensor:
    """FP32 power-of-two scales ``[MN, S]`` (one per 32 K) -> int16 UE8M0 pairs ``[MN, ceil(S / 2)]``;
    an odd S is padded with 2^0 so the padding pair half is a finite scale of zero-filled data."""
    exponents = ((sf.float().contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
    if exponents.size(1) % 2:
        exponents = torch.cat([exponents, exponents.new_full((exponents.size(0), 1), E8M0_ONE)], dim=1)
    return exponents.contiguous().view(torch.int16)


def unsupported(a, b, c, alpha) -> str | None:
    for name, op in (("a", a), ("b", b)):
        if op.fp4 or op.data.dtype != torch.float8_e4m3fn:
            return f"{name}: only E4M3 FP8 operands"
        if not op.k_major:
            return f"{name}: only K-major operands"
        if (op.gran_mn, op.gran_k) != (1, 32):
            return f"{name}: only the MX recipe (1, 1, 32), got granularity {(op.gran_mn, op.gran_k)}"
    if c is not None or alpha is not None:
        return "c / alpha (no FP8 epilogue kernel yet)"
    return None


def fp8_gemm_nt(a, b, d: torch.Tensor, c: torch.Tensor | None = None, alpha: float | None = None,
                compiled_dims: str = "nk") -> None:
    reason = unsupported(a, b, c, alpha)
    if reason:
        raise NotImplementedError(f"fp8_fp4_gemm_nt on Ascend: {reason}")
    m, n, k = a.mn, b.mn, a.k
    if m == 0 or n == 0 or k == 0:
        return
    sfa, sfb = ascend_scales(a.sf), ascend_scales(b.sf)
    defines = {"DG_D_FP32": int(d.dtype == torch.float32), **shape_defines(compiled_dims, m=m, n=n, k=k)}
    grid = min(m_blocks(m) * n_blocks(n), num_cube_cores(d))
    kernel("dg_fp8_mx_gemm", "ascend/fp8_mx_gemm.asc", defines)(
        grid, a.data, b.data, sfa, sfb, d, m, n, k, a.data.stride(0), b.data.stride(0), sfa.stride(0), d.stride(0))
