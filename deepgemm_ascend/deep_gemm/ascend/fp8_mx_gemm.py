"""Ascend MX block-scaled GEMM: the cube kernel ``fp8_mx_gemm.asc`` (``asc_mmad_mx``) behind
``fp8_fp4_gemm_{nt,nn,tn,tt}``, and the operand preparation every MX kernel of the package shares.

Entry point (for the dispatch table's Ascend column; the canonical arguments of
``deep_gemm.reference.fp8_fp4_gemm_nt``, already validated by ``deep_gemm.gemm``)::

    fp8_gemm_nt(a, b, d, c=None, alpha=None, compiled_dims="nk") -> None

- ``a``, ``b``: ``QuantOperand`` ``[M, K]`` / ``[N, K]`` with FP32 ``sf`` or packed ``packed_sf`` (``mx_scales``). Pairs served (the Ascend
  rules): FP8 x FP8 (either operand K- or MN-major: ``nn``/``tn``/``tt`` views load DN->NZ), FP4 x FP4
  (both K-major: the E2M1 mmad; otherwise widened as below), FP8 x FP4 and FP4 x FP8. Without ``c`` and
  ``alpha`` a K-major FP4 operand of a mixed pair is widened to E4M3 inside the GEMM
  (``fp8_fp4_mx_gemm.asc``: the vector cores write the widened tile straight into the cube's L1, as
  DeepGEMM-Ascend fuses it; the M-grouped FP8 x FP4 forms likewise, ``m_grouped_fp8_fp4_mx_gemm.asc``);
  otherwise (``c`` / ``alpha``, an MN-major FP4 operand, M-grouped FP4 x FP8) the vector-core kernel
  ``fp4_to_fp8.asc`` widens it first. Either way exact: every E2M1 value
  is an E4M3 value and the per-32 UE8M0 scales stay as they are.
- Granularity: ``gran_k`` 32, or 128 (each scale repeated over its four 32-blocks); any ``gran_mn``
  (repeated per row). The MX unit holds UE8M0 exponents, so FP32 scales must have a zero mantissa
  (positive powers of two): on the twin (CPU tensors) a non-zero mantissa raises ``ValueError``
  naming ``a[1]`` / ``b[1]`` before anything is written; NPU tensors are not read on the host (the
  exponent byte is what the kernel uses).
- Scales (``mx_scales``): packed UE8M0 with one scale per row and 32 K-elements (K a multiple of 64) is read
  where it lies, K-major rows (int32 words or int16 pairs) or MN-major int16 pairs; everything else is
  re-packed on the device into the Ascend layout: int16 UE8M0 pairs (K elements ``[64p, 64p + 32)`` in the
  low byte), MN-major: ``[.., ceil(K/64), MN]`` in memory.
- ``d`` ``[M, N]`` FP32 or BF16, written in place; ``c`` (``d``'s dtype, may be ``d``) and ``alpha``
  run the mixed kernel ``bf16_gemm_epilogue.asc`` with ``DG_MX`` (vector-core epilogue, ``c`` read and
  ``d`` written by the kernel).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import _validate as v
from .. import formats
from .._lib import LIB
from ._launch import args, cube_block_m, kernel, m_blocks, n_blocks, num_cube_cores, on_twin, shape_defines
from .fp4_to_fp8 import widen

E8M0_ONE = 127
MX_GRAN_K = 32


def ascend_scales(sf: torch.Tensor, mn: int, k: int, gran_mn: int = 1, gran_k: int = MX_GRAN_K) -> torch.Tensor:
    """FP32 scales ``[.., ceil(mn/gran_mn), ceil(k/gran_k)]`` (zero-mantissa values) -> the Ascend layout:
    int16 UE8M0 pairs ``[.., mn, ceil(k/64)]``, MN-major (``stride(-2) == 1``). An odd count of 32-blocks
    is padded with 2^0, a finite scale of zero-filled data."""
    rows = torch.arange(mn, device=sf.device) // gran_mn
    sf = sf.float().index_select(-2, rows)
    if gran_k != MX_GRAN_K:
        sf = sf.repeat_interleave(gran_k // MX_GRAN_K, dim=-1)[..., :-(-k // MX_GRAN_K)]
    exponents = ((formats.dense(sf).view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
    if exponents.size(-1) % 2:
        exponents = torch.cat([exponents, exponents.new_full(exponents.shape[:-1] + (1,), E8M0_ONE)], dim=-1)
    return exponents.contiguous().view(torch.int16).transpose(-1, -2).contiguous().transpose(-1, -2)


@dataclass(frozen=True)
class MxScales:
    """An operand's scales as the MX kernels read them: int16 UE8M0 pairs, K-major (pair p of row r at
    ``t[.., r * ld + p]``) or MN-major (at ``t[.., p * ld + r]``), groups ``group`` pairs apart."""
    t: torch.Tensor
    ld: int
    group: int
    k_major: bool

    def defines(self, operand: str) -> dict[str, int]:
        return {f"DG_SF{operand}_K_MAJOR": 1} if self.k_major else {}   # MN-major: mx_gemm.h's default


def no_overlap(t: torch.Tensor) -> bool:
    """No two elements of ``t`` share memory (no expanded or overlapping view): the kernels index the scales
    with ``t``'s strides, which the chip's movers may not take as 0."""
    end = 1
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape, strict=True) if sz > 1):
        if stride < end:
            return False
        end = stride * size
    return True


def k_major_pairs(p: torch.Tensor) -> torch.Tensor | None:
    """Packed UE8M0 rows ``p`` (int32 words or int16 pairs) viewed as int16 pairs where each row's words are
    contiguous (one word a row: any stride there), else None."""
    if p.size(-1) == 1:
        p = p.as_strided(p.shape, p.stride()[:-1] + (1,))
    return p.view(torch.int16) if p.stride(-1) == 1 else None


def mx_scales(name: str, op, valid_mn=None) -> MxScales:
    """``op``'s scales for the MX kernels. The caller's packed UE8M0 (a scale per row and 32 K-elements, K a multiple
    of 64 so no padding byte is read) is read where it lies, rows and groups apart (no expanded or overlapping
    view): K-major rows (int32 words or int16 pairs, stride(-1) == 1, as per-token casts write them) or
    DeepGEMM-Ascend's MN-major int16 pairs (stride(-2) == 1) -- no conversion, no look at the values. Packed
    scales are UE8M0 bytes whatever their layout, so none is checked (0 is 2^-127, 255 NaN, as the reference
    reads them); FP32 ones are checked (``check_mantissa``: ``valid_mn``, a mask or a function making one, limits
    it to the rows read), and
    everything else is converted (``ascend_scales``)."""
    p = op.packed_sf
    if p is not None and op.k % 64 == 0 and no_overlap(p):
        t = k_major_pairs(p)
        if t is not None:
            return MxScales(t, t.stride(-2), t.stride(0) if t.dim() == 3 else 0, True)
        if p.dtype == torch.int16 and p.stride(-2) == 1:
            return MxScales(p, p.stride(-1), p.stride(0) if p.dim() == 3 else 0, False)
    if p is None:
        check_mantissa(name, op.sf, valid_mn, op.gran_mn)
    t = ascend_scales(op.sf, op.mn, op.k, op.gran_mn, op.gran_k)
    return MxScales(t, t.stride(-1), t.stride(0) if t.dim() == 3 else 0, False)


def check_mantissa(name: str, sf: torch.Tensor, valid_mn=None, gran_mn: int = 1) -> None:
    """FP32 scales must be UE8M0-representable; only host-resident (twin) tensors are read.
    ``valid_mn`` (bool ``[MN]`` from a device layout, or a function making it) limits the check to the scale
    rows the kernel loads; with it the check runs only with ``DG_ASCEND_CHECKS=1``."""
    if not on_twin(sf) or sf.numel() == 0 or (valid_mn is not None and not LIB.env.get_int("ASCEND_CHECKS", 0)):
        return  # rows chosen by a layout are a read of the layout: only in the debug mode
    if valid_mn is not None:
        valid_mn = valid_mn() if callable(valid_mn) else valid_mn
        used = torch.nn.functional.pad(valid_mn, (0, (-valid_mn.numel()) % gran_mn)).view(-1, gran_mn).any(-1)
        sf = sf[used]
    good = formats.is_power_of_two(sf)
    if not bool(good.all()):
        raise v.fail(f"{name} values", "positive powers of two (a zero mantissa: the Ascend MX scale unit holds "
                     "UE8M0 exponents)", float(sf[~good].flatten()[0]))


def unsupported(a, b) -> str | None:
    """Why the MX kernels cannot serve this operand pair, or None."""
    for name, op in (("a", a), ("b", b)):
        if op.gran_k not in (32, 128):
            return f"{name}: K granularity {op.gran_k} (32 or 128 only)"
    return None


def operands(a, b):
    """(data a, data b, FP4 kernel?) as the MX kernels read them: both FP4 and K-major stay packed
    (bytes); otherwise FP4 operands are widened to E4M3 (exact)."""
    if a.fp4 and b.fp4 and a.k_major and b.k_major:
        return a.data.view(torch.uint8), b.data.view(torch.uint8), True
    data = [widen(op.data) if op.fp4 else op.data for op in (a, b)]
    return data[0], data[1], False


def layout(x: torch.Tensor) -> tuple[bool, int]:
    """(MN-major, stride of the non-unit dimension) of an ``[.., MN, K]`` operand."""
    return (False, x.stride(-2)) if x.stride(-1) == 1 else (True, x.stride(-1))


def prepare(a, b):
    """(data a, data b, sfa, sfb ``MxScales``, defines) for any MX kernel, the scale values checked where converted."""
    da, db, fp4 = operands(a, b)
    sfa, sfb = mx_scales("a[1]", a), mx_scales("b[1]", b)
    defines = {"DG_AB_FP4": int(fp4), "DG_A_MN_MAJOR": int(layout(da)[0]), "DG_B_MN_MAJOR": int(layout(db)[0]),
               **sfa.defines("A"), **sfb.defines("B")}
    return da, db, sfa, sfb, defines


def fused_fp4_operand(a, b) -> int:
    """1 (A) or 2 (B): the K-major FP4 operand of a mixed FP8 / FP4 pair, widened inside the GEMM
    (fp8_fp4_mx_gemm.asc; for B also m_grouped_fp8_fp4_mx_gemm.asc); 0 for every other pair."""
    if a.fp4 != b.fp4:
        fp4 = a if a.fp4 else b
        return (1 if a.fp4 else 2) if fp4.k_major and fp4.data.stride(-1) == 1 else 0
    return 0


def _fused(a, b, d: torch.Tensor, compiled_dims: str) -> None:
    """FP8 x FP4 / FP4 x FP8 without c and alpha: one mixed launch, the vector cores widening the FP4 operand
    into the cube's L1."""
    m, n, k = a.mn, b.mn, a.k
    side = fused_fp4_operand(a, b)
    da = a.data.view(torch.uint8) if a.fp4 else a.data
    db = b.data.view(torch.uint8) if b.fp4 else b.data
    sfa, sfb = mx_scales("a[1]", a), mx_scales("b[1]", b)
    (a_mn, lda), (b_mn, ldb) = layout(da), layout(db)
    cores = num_cube_cores(d)
    block_m = cube_block_m(m, n, cores)
    defines = {"DG_FP4_OPERAND": side, "DG_A_MN_MAJOR": int(a_mn and side != 1),
               "DG_B_MN_MAJOR": int(b_mn and side != 2), "DG_D_FP32": int(d.dtype == torch.float32),
               "DG_BLOCK_M": block_m, **sfa.defines("A"), **sfb.defines("B"),
               **shape_defines(compiled_dims, m=m, n=n, k=k)}
    kernel("dg_fp8_fp4_mx_gemm", "ascend/fp8_fp4_mx_gemm.asc", defines)(
        min(m_blocks(m, block_m) * n_blocks(n), cores),
        args("DgFp8MxGemmArgs", a=da, b=db, sfa=sfa.t, sfb=sfb.t, d=d, m=m, n=n, k=k, lda=lda, ldb=ldb,
             ld_sfa=sfa.ld, ld_sfb=sfb.ld, ldd=d.stride(0)))


def fp8_gemm_nt(a, b, d: torch.Tensor, c: torch.Tensor | None = None, alpha: float | None = None,
                compiled_dims: str = "nk") -> None:
    reason = unsupported(a, b)
    if reason:
        raise NotImplementedError(f"fp8_fp4_gemm_nt on Ascend: {reason}")
    m, n, k = a.mn, b.mn, a.k
    if m == 0 or n == 0 or k == 0:
        return
    if c is None and alpha is None and fused_fp4_operand(a, b):
        _fused(a, b, d, compiled_dims)
        return
    da, db, sfa, sfb, defines = prepare(a, b)
    defines.update({"DG_D_FP32": int(d.dtype == torch.float32), **shape_defines(compiled_dims, m=m, n=n, k=k)})
    cores = num_cube_cores(d)
    lda, ldb = layout(da)[1], layout(db)[1]
    if c is None and alpha is None:
        block_m = cube_block_m(m, n, cores)
        kernel("dg_fp8_mx_gemm", "ascend/fp8_mx_gemm.asc", {**defines, "DG_BLOCK_M": block_m})(
            min(m_blocks(m, block_m) * n_blocks(n), cores),
            args("DgFp8MxGemmArgs", a=da, b=db, sfa=sfa.t, sfb=sfb.t, d=d, m=m, n=n, k=k, lda=lda, ldb=ldb,
                 ld_sfa=sfa.ld, ld_sfb=sfb.ld, ldd=d.stride(0)))
        return
    grid = min(m_blocks(m) * n_blocks(n), cores)
    c_arg = d if c is None else c  # an unused pointer without c
    defines.update({"DG_MX": 1, "DG_HAS_C": int(c is not None)})
    kernel("dg_bf16_gemm_epilogue", "ascend/bf16_gemm_epilogue.asc", defines)(
        grid, args("DgBf16GemmEpilogueArgs", a=da, b=db, d=d, c=c_arg, k_groups=d, num_groups=1, m=m, n=n, k=k,
                   lda=lda, ldb=ldb, ldd=d.stride(0), ldc=c_arg.stride(0), d_group_stride=0, c_group_stride=0,
                   alpha=1.0 if alpha is None else float(alpha), sfa=sfa.t, sfb=sfb.t, ld_sfa=sfa.ld,
                   ld_sfb=sfb.ld))  # no K groups
