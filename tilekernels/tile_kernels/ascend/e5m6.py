"""E5M6 casts on Ascend (TileLang Ascend dialect, vector cores, SIMT): serve ``tile_kernels.quant``'s
``per_token_cast(x, 'e5m6', hidden)`` (``cast_to_e5m6``) and ``cast_back(..., x_special_fmt='e5m6')``
(``cast_back_from_e5m6``), bit-exact with ``reference/cast_e5m6``.

Cast: a core owns one token row. Pass 1 takes the row's amax over column tiles (SIMT lanes, a NaN-keeping
select: the device's max drops NaN), floored at 1e-4; ``sf = amax / 65024`` (with ``round_sf`` rounded up to
a power of two through its bits, ``sf_inv = 1 / sf``; else ``sf_inv = 65024 / amax``). Pass 2 encodes
``x * sf_inv`` as the reference does, in int32 bit arithmetic: the FP32 value truncated to half bits
(overflow -> inf, NaN kept), its top 12 bits, then round half to even on the 17 FP32 bits below; one thread
packs 8 codes into 3 little-endian words, MSB first. The row's scale is written both as FP32 and as its
UE8M0 exponent word; the wrapper lays either out as the flags ask (row-major, column-major storage
``(1, align(T, 4))``, packed).

Cast-back: one thread per 8 codes: unpack, decode the half bits exactly (subnormals ``m 2^-24``), times the
row's scale (FP32, or a packed UE8M0 byte: 0xFF NaN, 0x00 2^-127), rounded to BF16 (RNE) or kept as FP32.
It serves the whole-row scales E5M6 has (one scale column: ``x_block_size[1] >= hidden``, any row block).

Tokens and the hidden size are symbolic (``T.dynamic``): one lowering per input dtype and ``round_sf``
(cast) or per output dtype, scale kind and row block ``x_block_size[0]`` (cast-back) serves every shape.
No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from .block_cast import nan_max

E5M6_MAX = 65024.0
AMAX_FLOOR = 1e-4
COLS = 2048  # values of a row a core stages per step (a multiple of 8)
LANES = 64


def _encode_macro(T):
    """``encode(v, dst, i)``: ``dst[i]`` = the 12-bit E5M6 code of FP32 ``v``: the value truncated to half bits
    (overflow -> inf, NaN -> 0x7FFF | sign), its top 12 bits, then round half to even on the 17 FP32 bits
    below. Each step is its own variable: the expression stays small for TileLang's simplifier."""

    @T.macro
    def encode(v, dst, i):
        bits = T.alloc_var("int32")
        sign = T.alloc_var("int32")
        exp = T.alloc_var("int32")
        mant = T.alloc_var("int32")
        half = T.alloc_var("int32")
        code = T.alloc_var("int32")
        bits = T.reinterpret(v, "int32")
        sign = T.bitwise_and(T.shift_right(bits, 16), 0x8000)
        exp = T.bitwise_and(T.shift_right(bits, 23), 0xFF)
        mant = T.bitwise_and(bits, 0x7FFFFF)
        if exp >= 113:
            half = T.bitwise_or(sign, T.bitwise_or(T.shift_left(exp - 112, 10), T.shift_right(mant, 13)))
        elif exp >= 103:
            half = T.bitwise_or(sign, T.shift_right(T.bitwise_or(mant, 0x800000), 126 - exp))
        else:
            half = sign
        if T.And(exp > 142, exp < 255):
            half = T.bitwise_or(sign, 0x7C00)
        if exp == 255:
            half = T.bitwise_or(sign, T.if_then_else(mant == 0, 0x7C00, 0x7FFF))
        code = T.shift_right(half, 4)
        if T.bitwise_and(code, 1) + T.bitwise_and(bits, 0x1FFFF) > 0x10000:
            code = code + 1
        dst[i] = T.bitwise_and(code, 0xFFF)

    return encode


def _decode_macro(T):
    """``decode(code, s, dst, i)``: ``dst[i]`` = (the half ``code << 4``, decoded exactly) * ``s``, cast to dst's type."""

    @T.macro
    def decode(code, s, dst, i):
        exp = T.alloc_var("int32")
        mant = T.alloc_var("int32")
        sign = T.alloc_var("int32")
        value = T.alloc_var("float32")
        exp = T.bitwise_and(T.shift_right(code, 6), 0x1F)
        mant = T.bitwise_and(code, 0x3F)
        sign = T.shift_left(T.bitwise_and(T.shift_right(code, 11), 1), 31)
        if exp == 0:
            value = T.Cast("float32", mant) * T.float32(2.0 ** -20)  # (mant << 4) * 2^-24
            if sign != 0:
                value = -value
        elif exp == 31:
            value = T.reinterpret(T.bitwise_or(sign, T.bitwise_or(0x7F800000, T.shift_left(mant, 17))), "float32")
        else:
            value = T.reinterpret(T.bitwise_or(sign, T.bitwise_or(T.shift_left(exp + 112, 23), T.shift_left(mant, 17))),
                                  "float32")
        dst[i] = T.Cast(dst.dtype, value * s)

    return decode


@functools.cache
def build_cast(in_dtype: str, round_sf: bool):
    import tilelang.ascend.language as T

    t, h, words = T.dynamic("t"), T.dynamic("h"), T.dynamic("words")
    groups = COLS // 8
    encode = _encode_macro(T)

    @T.prim_func
    def cast_to_e5m6(X: T.Tensor((t, h), in_dtype), Q: T.Tensor((t, words), "int32"), SF: T.Tensor((t,), "float32"),
                     Exp: T.Tensor((t,), "int32")):
        with T.Kernel(t) as row:
            x = T.alloc_shared((COLS,), in_dtype)
            q = T.alloc_shared((groups * 3,), "int32")
            codes = T.alloc_shared((COLS,), "int32")
            part = T.alloc_shared((LANES,), "float32")
            sc = T.alloc_shared((8,), "float32")  # sf, sf_inv
            ex = T.alloc_shared((8,), "int32")
            with T.SimtVF(threads=LANES):
                for ln in T.Parallel(LANES):
                    part[ln] = 0.0
            for step in T.serial(T.ceildiv(h, COLS)):
                c0 = step * COLS
                cols = T.min(COLS, h - c0)
                T.copy(X[row, c0:c0 + cols], x[0:cols])
                with T.SimtVF(threads=LANES):
                    for ln in T.Parallel(LANES):
                        for j in T.serial(COLS // LANES):
                            c = j * LANES + ln
                            if c < cols:
                                part[ln] = nan_max(T, part[ln], T.abs(T.Cast("float32", x[c])))
            with T.SimtVF(threads=1):
                for _ in T.Parallel(1):
                    amax = T.alloc_var("float32")
                    amax = 0.0
                    for ln in T.serial(LANES):
                        amax = nan_max(T, amax, part[ln])
                    amax = T.if_then_else(amax < T.float32(AMAX_FLOOR), T.float32(AMAX_FLOOR), amax)
                    s = amax / T.float32(E5M6_MAX)
                    if round_sf:
                        s = T.reinterpret(T.bitwise_and(T.reinterpret(s, "int32") + 0x7FFFFF, 0x7F800000), "float32")
                        sc[1] = 1.0 / s
                    else:
                        sc[1] = T.float32(E5M6_MAX) / amax
                    sc[0] = s
                    ex[0] = T.bitwise_and(T.shift_right(T.reinterpret(s, "int32"), 23), 0xFF)
            T.copy(sc[0:1], SF[row:row + 1])
            T.copy(ex[0:1], Exp[row:row + 1])
            for step in T.serial(T.ceildiv(h, COLS)):
                c0 = step * COLS
                cols = T.min(COLS, h - c0)
                T.copy(X[row, c0:c0 + cols], x[0:cols])
                with T.SimtVF(threads=256):
                    for c in T.Parallel(COLS):
                        encode(T.Cast("float32", x[c]) * sc[1], codes, c)
                with T.SimtVF(threads=groups):
                    for gi in T.Parallel(groups):
                        cw = [T.Cast("uint32", codes[gi * 8 + j]) for j in range(8)]
                        q[gi * 3] = T.reinterpret(T.bitwise_or(
                            T.bitwise_or(T.shift_left(cw[0], T.uint32(20)), T.shift_left(cw[1], T.uint32(8))),
                            T.shift_right(cw[2], T.uint32(4))), "int32")
                        q[gi * 3 + 1] = T.reinterpret(T.bitwise_or(
                            T.bitwise_or(T.shift_left(T.bitwise_and(cw[2], T.uint32(0xF)), T.uint32(28)),
                                         T.shift_left(cw[3], T.uint32(16))),
                            T.bitwise_or(T.shift_left(cw[4], T.uint32(4)), T.shift_right(cw[5], T.uint32(8)))), "int32")
                        q[gi * 3 + 2] = T.reinterpret(T.bitwise_or(
                            T.bitwise_or(T.shift_left(T.bitwise_and(cw[5], T.uint32(0xFF)), T.uint32(24)),
                                         T.shift_left(cw[6], T.uint32(12))), cw[7]), "int32")
                T.copy(q[0:cols // 8 * 3], Q[row, c0 // 8 * 3:c0 // 8 * 3 + cols // 8 * 3])

    return cast_to_e5m6


@functools.cache
def build_cast_back(out_dtype: str, packed_sf: bool, bm: int):
    """``Q (t, words)`` int32 -> ``Out (t, h)``; ``SF (mb,)``: each row block's FP32 scale or packed
    UE8M0 word (its low byte the exponent)."""
    import tilelang.ascend.language as T

    t, h, words, mb = T.dynamic("t"), T.dynamic("h"), T.dynamic("words"), T.dynamic("mb")
    groups = COLS // 8
    sf_dtype = "int32" if packed_sf else "float32"
    decode = _decode_macro(T)

    @T.prim_func
    def cast_back_from_e5m6(Q: T.Tensor((t, words), "int32"), SF: T.Tensor((mb,), sf_dtype),
                            Out: T.Tensor((t, h), out_dtype)):
        with T.Kernel(t) as row:
            q = T.alloc_shared((groups * 3,), "int32")
            codes = T.alloc_shared((COLS,), "int32")
            sf = T.alloc_shared((8,), sf_dtype)
            out = T.alloc_shared((COLS,), out_dtype)
            T.copy(SF[row // bm:row // bm + 1], sf[0:1])
            for step in T.serial(T.ceildiv(h, COLS)):
                c0 = step * COLS
                cols = T.min(COLS, h - c0)
                T.copy(Q[row, c0 // 8 * 3:c0 // 8 * 3 + cols // 8 * 3], q[0:cols // 8 * 3])
                with T.SimtVF(threads=groups):
                    for gi in T.Parallel(groups):
                        w0 = T.reinterpret(q[gi * 3], "uint32")
                        w1 = T.reinterpret(q[gi * 3 + 1], "uint32")
                        w2 = T.reinterpret(q[gi * 3 + 2], "uint32")
                        unpacked = (T.shift_right(w0, T.uint32(20)), T.shift_right(w0, T.uint32(8)),
                                    T.bitwise_or(T.shift_left(w0, T.uint32(4)), T.shift_right(w1, T.uint32(28))),
                                    T.shift_right(w1, T.uint32(16)), T.shift_right(w1, T.uint32(4)),
                                    T.bitwise_or(T.shift_left(w1, T.uint32(8)), T.shift_right(w2, T.uint32(24))),
                                    T.shift_right(w2, T.uint32(12)), w2)
                        for j, code in enumerate(unpacked):
                            codes[gi * 8 + j] = T.Cast("int32", T.bitwise_and(code, T.uint32(0xFFF)))
                with T.SimtVF(threads=256):
                    for c in T.Parallel(COLS):
                        s = T.alloc_var("float32")
                        if packed_sf:
                            e = T.bitwise_and(sf[0], 0xFF)
                            s = T.reinterpret(T.if_then_else(e == 255, 0x7FC00000, T.if_then_else(
                                e == 0, 0x00400000, T.shift_left(e, 23))), "float32")
                        else:
                            s = sf[0]
                        decode(codes[c], s, out, c)
                T.copy(out[0:cols], Out[row, c0:c0 + cols])

    return cast_back_from_e5m6


def cast_to_e5m6(x, num_per_channels, use_tma_aligned_col_major_sf=False, round_sf=False, use_packed_ue8m0=False):
    """``tile_kernels.quant.per_token_cast(x, 'e5m6', hidden)``: ``(packed uint8 (T, 3H/2), sf)`` in the
    layout the flags ask for (as ``reference/cast_e5m6.cast_to_e5m6``)."""
    import torch

    from .._lib import LIB

    t, h = x.shape
    dev = x.device
    q = torch.empty((t, h * 3 // 8), dtype=torch.int32, device=dev)
    col, packed = use_tma_aligned_col_major_sf, use_packed_ue8m0
    sf_dtype = torch.int32 if packed else torch.float32
    storage = torch.zeros((1, -(-t // 4) * 4 if col else t), dtype=sf_dtype, device=dev)
    scale = storage[0, :t] if not packed else torch.empty((t,), dtype=torch.float32, device=dev)
    exps = storage[0, :t] if packed else torch.empty((t,), dtype=torch.int32, device=dev)
    if t and h:
        in_dtype = "bfloat16" if x.dtype == torch.bfloat16 else "float32"
        LIB.run_tilelang(build_cast, (in_dtype, bool(round_sf)), x.contiguous(), q, scale, exps)
    sf = storage[:, :t].T if col else storage.view(t, 1)
    return q.view(torch.uint8).view(t, h * 3 // 2), sf


def cast_back_from_e5m6(x, fmt, x_block_size):
    """``tile_kernels.quant.cast_back(x, fmt, block, x_special_fmt='e5m6')`` for one scale column."""
    import torch

    from .._lib import LIB

    data, sf = x
    t, h = data.shape[0], data.shape[1] * 2 // 3
    out = torch.empty((t, h), dtype=torch.float32 if fmt == "fp32" else torch.bfloat16, device=data.device)
    if t and h:
        column = sf[:, 0].contiguous()  # one scale per row block, whatever the layout
        LIB.run_tilelang(build_cast_back, ("float32" if fmt == "fp32" else "bfloat16", sf.dtype == torch.int32,
                                         x_block_size[0]), data.contiguous().view(torch.int32).view(t, -1),
                       column, out)
    return out


def one_scale_column(x, fmt, x_block_size) -> bool:
    """The cast-back's form: every row's values share one scale (E5M6's whole-row scales)."""
    return x_block_size[1] >= x[0].shape[1] * 2 // 3
