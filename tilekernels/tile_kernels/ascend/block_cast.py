"""Block-scaled E4M3 / E2M1 casts on Ascend (TileLang Ascend dialect, vector cores, SIMT).

One kernel serves every block shape ``(bm, bk)`` (rows x columns per scale): per-token ``(1, npc)``,
per-block ``(bm, bk)`` and per-channel ``(npt, 1)``. A core owns a ``(br, bc)`` tile of x holding whole
scale blocks (``br % bm == 0``, ``bc % bk == 0``; ragged edges are masked) and runs three SIMT passes
over it in UB: per-row partial amax of each block, the block's scale and reciprocal, and the cast.
The arithmetic is the reference's (``reference/cast.py``): ``sf = max(amax, clamp_min) / fmt_max``,
``sf_inv = fmt_max / amax`` (or, with ``round_sf``, ``sf`` rounded up to a power of two through its bits
and ``sf_inv = 1 / sf``); E4M3 = RNE cast of ``clamp(x * sf_inv, +-448)``; E2M1 codes by the
reference's midpoint table (ties to the even code), sign from the sign bit, even column in the low
nibble. NaN follows torch: a NaN in a block makes its amax and scale NaN (``sf`` rounded through its
bits becomes 0, so ``sf_inv = 0``) and a NaN element's E4M3 byte is NaN; the kernel therefore reduces
with a NaN-keeping select and writes E4M3 bytes itself (the device's float max and saturating FP8
cast drop NaN). A NaN product's E2M1 code is a zero whose sign is the one torch's x86 product gives
(``product_sign``), selected explicitly rather than left to the device's NaN propagation.

Scale layouts written (``SfLayout``): ``row`` FP32 ``(Mb, Kb)``; ``col`` FP32 storage ``(Kb, ld)`` (the
TMA-aligned column-major form, ``ld = align(Mb, 4)``); ``ue8m0`` the Ascend packed UE8M0 ABI: int16
storage ``(ceil(Kb / 2), Mb)``, column-major without padding (the form deep_gemm's Ascend MXFP8 GEMMs
read), byte ``j`` of word ``i`` = biased exponent of block ``2i + j``, a pair's missing second block 0.
The kernel sees every packed scale as bytes (a ``uint8`` view), so no signed 16-bit arithmetic is needed.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import dataclasses
import functools

from deepjit.tilelang_route.ub import padded

from ..reference.numerics import EXP_LN2_HI, EXP_LN2_LO, EXP_LOG2E, EXP_MAX, EXP_MIN, EXP_POLY
from ._tiles import tile_shape

FMT_MAX = {"e4m3": 448.0, "e2m1": 6.0}
CLAMP_MIN = {"e4m3": 1e-4, "e2m1": 6.0 * 2.0 ** -126}
SF_LAYOUTS = ("row", "col", "ue8m0")
# E2M1 code boundaries on |v| and whether a value on the boundary rounds up (the even code wins ties).
E2M1_BOUNDS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))


def clamp_gate(T, a, clamp):
    """SwiGLU's gate ``a`` clamped from above (upstream's optional clamp); a NaN compares false and passes."""
    return a if clamp is None else T.if_then_else(a > clamp, T.float32(clamp), a)


def clamp_up(T, b, clamp):
    """SwiGLU's ``b`` clamped to ``[-clamp, clamp]``; a NaN passes."""
    if clamp is None:
        return b
    return T.if_then_else(b > clamp, T.float32(clamp), T.if_then_else(b < -clamp, T.float32(-clamp), b))


def swiglu_of(T, a, b):
    """``silu(a) * b`` in FP32 of clamped values. Callers pass ``a`` and ``b`` as local variables
    (``T.alloc_var``): as expressions they are copied into every use inside ``exp_f32``, and TileLang's
    layout inference and tile-op lowering then took 40-75 s on the nested selects (under a second with variables)."""
    return a / (1.0 + exp_f32(T, -a)) * b


def nan_max(T, acc, v):
    """``max`` that keeps a NaN, as torch's amax / clamp: the device's float max (like ``fmaxf``, per the
    SIMT API docs) returns the other operand of a NaN, so a NaN block would get a finite scale."""
    return T.if_then_else(T.Or(v > acc, T.isnan(v)), v, acc)


def scale_of(T, amax, fmax: float, round_sf: bool):
    """A block's scale from its floored amax: ``amax / fmax``, with ``round_sf`` rounded up to a power of two
    through its bits (a NaN amax becomes 0)."""
    s = amax / fmax
    if round_sf:
        s = T.reinterpret(T.bitwise_and(T.reinterpret(s, "int32") + 0x7FFFFF, 0x7F800000), "float32")
    return s


def scale_inv(T, s, amax, fmax: float, round_sf: bool):
    """The multiplier that quantises with scale ``s``: ``1 / s`` for a rounded scale, else ``fmax / amax``;
    0 for a zero scale (a zero clamp_min, a NaN amax rounded)."""
    return T.if_then_else(s == 0.0, T.float32(0.0), 1.0 / s if round_sf else fmax / amax)


def e4m3_byte(T, v, fmax):
    """E4M3 byte of ``clamp(v, +-fmax)``; a NaN stays NaN (0x7F | sign, as torch writes it): the device's
    saturating FP8 cast, the one TileLang emits, turns NaN into +0."""
    sign = T.Cast("uint8", T.shift_right(T.reinterpret(v, "uint32"), T.uint32(24)))
    clamped = T.if_then_else(v > fmax, T.float32(fmax), T.if_then_else(v < -fmax, T.float32(-fmax), v))
    return T.if_then_else(T.isnan(v), T.bitwise_or(T.bitwise_and(sign, T.uint8(0x80)), T.uint8(0x7F)),
                          T.reinterpret(T.Cast("float8_e4m3fn", clamped), "uint8"))


@dataclasses.dataclass(frozen=True)
class Swiglu:
    """A SwiGLU prologue: ``weighted`` rows take ``topk_weights.flatten()[pos_to_token_topk[row]]`` (0 for
    -1; ``num_weights`` entries); ``clamp``: a clamped to ``<= clamp``, b to ``[-clamp, clamp]``."""
    weighted: bool = False
    clamp: float | None = None
    num_weights: int = 1


def exp_f32(T, x):
    """``reference/numerics.exp_f32``, operation for operation (FP32 multiplies and adds, no FMA, n rounded
    half to even); NaN passes through the range clamp."""
    xc = T.if_then_else(x < EXP_MIN, T.float32(EXP_MIN), T.if_then_else(x > EXP_MAX, T.float32(EXP_MAX), x))
    n = T.nearbyint(xc * T.float32(EXP_LOG2E))
    r = xc - n * T.float32(EXP_LN2_HI)
    r = r - n * T.float32(EXP_LN2_LO)
    p = T.float32(EXP_POLY[0])
    for c in EXP_POLY[1:]:
        p = p * r + T.float32(c)
    two_n = T.reinterpret(T.shift_left(T.Cast("int32", n) + 127, 23), "float32")
    y = p * two_n
    return T.if_then_else(x > EXP_MAX, T.infinity("float32"), T.if_then_else(x < EXP_MIN, T.float32(0.0), y))


def _sign_bit(T, v):
    return T.Cast("int32", T.shift_right(T.reinterpret(v, "uint32"), T.uint32(31)))


def product_sign(T, x, s_inv, v):
    """Sign bit of ``v = x * s_inv`` as torch's vectorised x86 product gives it, NaN included: of two NaN
    operands the second (``s_inv``) comes out, of one NaN that one, and ``inf * 0`` is the default NaN,
    which is negative. (Torch's scalar tail and thread-chunk edges return the first of two NaNs, so the
    reference's sign there depends on the element's position; this follows the loop body.) The device's
    own NaN propagation is not documented, and the twin's C++ returns the first of two NaNs, so a NaN
    product's sign is selected explicitly."""
    return T.if_then_else(T.isnan(v), T.if_then_else(T.isnan(s_inv), _sign_bit(T, s_inv),
                                                     T.if_then_else(T.isnan(x), _sign_bit(T, x), 1)),
                          _sign_bit(T, v))


def _e2m1_code(T, x, s_inv):
    """E2M1 code (sign in bit 3) of ``x * s_inv``; a NaN product (no E2M1 NaN) is a signed zero code."""
    v = x * s_inv
    a = T.abs(v)
    code = T.int32(0)
    for bound, inclusive in E2M1_BOUNDS:
        code = code + T.if_then_else(a >= bound if inclusive else a > bound, 1, 0)
    return code + product_sign(T, x, s_inv, v) * 8


@functools.cache
def build(m: int, k: int, in_dtype: str, fmt: str, bm: int, bk: int, round_sf: bool, layout: str, ld: int,
          clamp_min: float | None = None, given_sf: bool = False, swiglu: Swiglu | None = None):
    """The PrimFunc for an ``(m, k)`` input of ``in_dtype`` ("bfloat16"/"float32"); ``ld`` is the
    leading dimension of a column-major scale storage (``Mb`` rows padded); ``clamp_min`` replaces the
    format's amax floor; ``given_sf``: SF is an input (row-major FP32) and x is quantised with ``1 / sf``;
    ``swiglu``: X is ``(m, 2k)`` ``[a | b]`` and the cast is of ``silu(a) * b`` (times the row weight)."""
    import tilelang.ascend.language as T

    in_bytes = 2 if in_dtype == "bfloat16" else 4
    # a SwiGLU tile holds a and b (in_dtype) and y (FP32)
    tile_bytes = in_bytes if swiglu is None else 2 * in_bytes + 4
    br, bc = tile_shape(m, k, bm, bk, tile_bytes, 2 if layout == "ue8m0" else 1)
    mb_all, kb_all = -(-m // bm), -(-k // bk)
    nmb, nkb = br // bm, bc // bk
    fmax, cmin = FMT_MAX[fmt], CLAMP_MIN[fmt] if clamp_min is None else clamp_min
    e2m1 = fmt == "e2m1"
    qk, qbc = (k // 2, bc // 2) if e2m1 else (k, bc)
    if layout == "row":
        sf_shape, sf_dtype, sf_tile = (mb_all, kb_all), "float32", (nmb, padded(nkb, 4))
    elif layout == "col":
        sf_shape, sf_dtype, sf_tile = (kb_all, ld), "float32", (nkb, padded(nmb, 4))
    else:
        sf_shape, sf_dtype, sf_tile = (-(-kb_all // 2), mb_all * 2), "uint8", (nkb // 2, padded(nmb * 2, 1))
    threads = min(256, br * nkb)
    x_dtype = in_dtype if swiglu is None else "float32"
    x_shape = (m, k) if swiglu is None else (m, 2 * k)
    weighted = swiglu is not None and swiglu.weighted
    clamp = None if swiglu is None else swiglu.clamp
    tw_len = swiglu.num_weights if weighted else 1

    @T.prim_func
    def block_cast(X: T.Tensor(x_shape, in_dtype), P2TT: T.Tensor((m if weighted else 1,), "int32"),
                   TW: T.Tensor((tw_len,), "float32"), Q: T.Tensor((m, qk), "uint8"), SF: T.Tensor(sf_shape, sf_dtype)):
        with T.Kernel(T.ceildiv(m, br) * T.ceildiv(k, bc)) as bid:
            x = T.alloc_shared((br, bc), x_dtype)
            part = T.alloc_shared((br, nkb), "float32")
            inv = T.alloc_shared((nmb, nkb), "float32")
            sf = T.alloc_shared(sf_tile, sf_dtype)
            q = T.alloc_shared((br, qbc), "uint8")
            r0 = (bid // T.ceildiv(k, bc)) * br
            c0 = (bid % T.ceildiv(k, bc)) * bc
            rows = T.min(br, m - r0)
            cols = T.min(bc, k - c0)
            if swiglu is None:
                T.copy(X[r0:r0 + rows, c0:c0 + cols], x[0:rows, 0:cols])
            else:
                xa = T.alloc_shared((br, bc), in_dtype)
                xb = T.alloc_shared((br, bc), in_dtype)
                rw = T.alloc_shared((br, 8), "float32")  # a row's weight, at the start of its own 32-byte block
                p2tt = T.alloc_shared((padded(br, 4),), "int32")
                T.copy(X[r0:r0 + rows, c0:c0 + cols], xa[0:rows, 0:cols])
                T.copy(X[r0:r0 + rows, k + c0:k + c0 + cols], xb[0:rows, 0:cols])
                if weighted:
                    T.copy(P2TT[r0:r0 + rows], p2tt[0:rows])
                    for r in T.serial(rows):
                        if T.And(p2tt[r] >= 0, p2tt[r] < tw_len):  # out of range: weight 0, as -1
                            T.copy(TW[p2tt[r]:p2tt[r] + 1], rw[r, 0:1])
                with T.SimtVF(threads=threads):
                    for r, kk in T.Parallel(br, nkb):
                        wr = T.alloc_var("float32")
                        wr = 1.0
                        if weighted:
                            wr = T.if_then_else(T.And(p2tt[r] >= 0, p2tt[r] < tw_len), rw[r, 0], T.float32(0.0))
                        for j in T.serial(bk):
                            c = kk * bk + j
                            a = T.alloc_var("float32")
                            b = T.alloc_var("float32")
                            a = clamp_gate(T, T.Cast("float32", xa[r, c]), clamp)
                            b = clamp_up(T, T.Cast("float32", xb[r, c]), clamp)
                            y = T.alloc_var("float32")
                            y = swiglu_of(T, a, b)
                            if weighted:
                                y = y * wr
                            x[r, c] = y
            if given_sf:
                T.copy(SF[r0 // bm:r0 // bm + T.ceildiv(rows, bm), c0 // bk:c0 // bk + T.ceildiv(cols, bk)],
                       sf[0:T.ceildiv(rows, bm), 0:T.ceildiv(cols, bk)])
                with T.SimtVF(threads=min(256, nmb * nkb)):
                    for i, kk in T.Parallel(nmb, nkb):
                        inv[i, kk] = 1.0 / sf[i, kk]
            else:
                with T.SimtVF(threads=threads):
                    for r, kk in T.Parallel(br, nkb):
                        amax = T.alloc_var("float32")
                        amax = 0.0
                        for j in T.serial(bk):
                            if kk * bk + j < cols:
                                amax = nan_max(T, amax, T.abs(T.Cast("float32", x[r, kk * bk + j])))
                        part[r, kk] = amax
                with T.SimtVF(threads=min(256, nmb * nkb)):
                    for i, kk in T.Parallel(nmb, nkb):
                        amax = T.alloc_var("float32")
                        amax = cmin
                        for j in T.serial(bm):
                            if i * bm + j < rows:
                                amax = nan_max(T, amax, part[i * bm + j, kk])
                        s = T.alloc_var("float32")
                        s = scale_of(T, amax, fmax, round_sf)
                        inv[i, kk] = scale_inv(T, s, amax, fmax, round_sf)
                        if layout == "row":
                            sf[i, kk] = s
                        elif layout == "col":
                            sf[kk, i] = s
                        else:
                            exp = T.shift_right(T.reinterpret(s, "int32"), 23)
                            sf[kk // 2, i * 2 + kk % 2] = T.if_then_else(kk * bk < cols, T.Cast("uint8", exp), T.uint8(0))
            with T.SimtVF(threads=threads):
                for r, kk in T.Parallel(br, nkb):
                    s_inv = inv[r // bm, kk]
                    if e2m1:
                        for j in T.serial(bk // 2):
                            c = kk * bk + j * 2
                            lo = _e2m1_code(T, T.Cast("float32", x[r, c]), s_inv)
                            hi = _e2m1_code(T, T.Cast("float32", x[r, c + 1]), s_inv)
                            q[r, c // 2] = T.Cast("uint8", lo + hi * 16)
                    else:
                        v = T.alloc_var("float32")  # a scalar: SIMT has no vector form of the byte select
                        for j in T.serial(bk):
                            v = T.Cast("float32", x[r, kk * bk + j]) * s_inv
                            q[r, kk * bk + j] = e4m3_byte(T, v, fmax)
            qc0 = c0 // 2 if e2m1 else c0
            qcols = cols // 2 if e2m1 else cols
            T.copy(q[0:rows, 0:qcols], Q[r0:r0 + rows, qc0:qc0 + qcols])
            mb0, kb0 = r0 // bm, c0 // bk
            nm, nk = T.ceildiv(rows, bm), T.ceildiv(cols, bk)
            if layout == "row":
                if not given_sf:
                    T.copy(sf[0:nm, 0:nk], SF[mb0:mb0 + nm, kb0:kb0 + nk])
            elif layout == "col":
                T.copy(sf[0:nk, 0:nm], SF[kb0:kb0 + nk, mb0:mb0 + nm])
            else:
                T.copy(sf[0:T.ceildiv(nk, 2), 0:nm * 2], SF[kb0 // 2:kb0 // 2 + T.ceildiv(nk, 2), mb0 * 2:mb0 * 2 + nm * 2])

    return block_cast


def cast(x, fmt: str, block: tuple[int, int], col: bool, round_sf: bool, packed: bool, sf=None, clamp_min=None,
         swiglu: Swiglu | None = None, pos_to_token_topk=None, topk_weights=None):
    """``(q, sf)`` of a BF16/FP32 ``(M, K)`` tensor in ``block``-shared scales, sf in the requested layout;
    with ``sf`` given (row-major FP32) only ``q``, quantised with ``1 / sf``; with ``swiglu`` x is
    ``(M, 2K)`` and the cast is of its SwiGLU (weighted by ``topk_weights[pos_to_token_topk]``)."""
    import torch

    from .._lib import LIB

    x = x.contiguous()
    m, k = x.shape[0], x.shape[1] // (1 if swiglu is None else 2)
    bm, bk = block
    mb, kb = -(-m // bm), -(-k // bk)
    q = torch.empty((m, k // 2) if fmt == "e2m1" else (m, k), dtype=torch.int8 if fmt == "e2m1" else torch.float8_e4m3fn,
                    device=x.device)
    given = sf is not None
    if given:
        kernel_sf, layout, ld = sf.contiguous(), "row", 0
    elif packed:
        storage = torch.zeros((-(-kb // 2), mb), dtype=torch.int16, device=x.device)
        sf, kernel_sf, layout, ld = storage.T, storage.view(torch.uint8), "ue8m0", 0
    elif col:
        ld = -(-mb // 4) * 4
        storage = torch.zeros((kb, ld), dtype=torch.float32, device=x.device)
        sf, kernel_sf, layout = storage.T[:mb], storage, "col"
    else:
        sf = kernel_sf = torch.empty((mb, kb), dtype=torch.float32, device=x.device)
        layout, ld = "row", 0
    if m and k:
        args = (m, k, "bfloat16" if x.dtype == torch.bfloat16 else "float32", fmt, bm, bk, bool(round_sf), layout, ld,
                None if clamp_min is None else float(clamp_min), given, swiglu)
        one = torch.zeros(1, dtype=torch.int32, device=x.device)  # the routing inputs of an unweighted cast
        weighted = swiglu is not None and swiglu.weighted
        LIB.run_tilelang(build, args, x, pos_to_token_topk.contiguous() if weighted else one,
                       topk_weights.float().contiguous().view(-1) if weighted else one.float(), q.view(torch.uint8),
                       kernel_sf)
    return q if given else (q, sf)


def per_token_cast(x, fmt: str, num_per_channels: int, x_block_size=None, use_tma_aligned_col_major_sf: bool = False,
                   round_sf: bool = False, use_packed_ue8m0: bool = False, sf=None, clamp_min=None):
    """``tile_kernels.quant.per_token_cast`` for fmt 'e4m3' / 'e2m1'; a ``(data, sf)`` input is dequantised
    to FP32 by the Ascend cast-back kernel first. Packed UE8M0 scales come in the Ascend int16 form. With
    ``sf`` (precomputed, row-major FP32) only the data is returned."""
    if fmt not in FMT_MAX:
        raise NotImplementedError(f"the Ascend per_token_cast serves fmt 'e4m3' and 'e2m1', not {fmt!r}")
    if isinstance(x, (tuple, list)):
        from .cast_back import cast_back
        x = cast_back(tuple(x), "fp32", x_block_size)
    return cast(x, fmt, (1, num_per_channels), use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, sf, clamp_min)


def per_block_cast(x, fmt: str, block_size: tuple[int, int], use_tma_aligned_col_major_sf: bool = False,
                   round_sf: bool = False, use_packed_ue8m0: bool = False, sf=None, clamp_min=None):
    """``tile_kernels.quant.per_block_cast``: one scale per ``block_size = (bm, bk)`` block."""
    return cast(x, fmt, tuple(block_size), use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, sf, clamp_min)


def swiglu_forward_and_per_token_cast(x, num_per_channels: int, pos_to_token_topk=None, topk_weights=None,
                                      use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                                      use_packed_ue8m0: bool = False, swiglu_clamp_value=None, sf_clamp_min=None):
    """``tile_kernels.quant.swiglu_forward_and_per_token_cast`` (E4M3) without ``clamped_count``: SwiGLU in
    the cast kernel's first pass (``a / (1 + exp_f32(-a)) * b``, the row weight, the clamp), then the cast."""
    weighted = pos_to_token_topk is not None
    swiglu = Swiglu(weighted, None if swiglu_clamp_value is None else float(swiglu_clamp_value),
                    topk_weights.numel() if weighted else 1)
    return cast(x, "e4m3", (1, num_per_channels), use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0,
                clamp_min=sf_clamp_min, swiglu=swiglu, pos_to_token_topk=pos_to_token_topk, topk_weights=topk_weights)


def per_channel_cast(x, fmt: str, num_per_tokens: int, round_sf: bool = False):
    """``tile_kernels.quant.per_channel_cast``: E4M3, one scale per channel per ``num_per_tokens`` tokens."""
    return cast(x, fmt, (num_per_tokens, 1), False, round_sf, False)
