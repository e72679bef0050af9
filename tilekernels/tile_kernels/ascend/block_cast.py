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
cast drop NaN).

Scale layouts written (``SfLayout``): ``row`` FP32 ``(Mb, Kb)``; ``col`` FP32 storage ``(Kb, ld)`` (the
TMA-aligned column-major form, ``ld = align(Mb, 4)``); ``ue8m0`` the Ascend packed UE8M0 ABI: int16
storage ``(ceil(Kb / 2), Mb)``, column-major without padding (the form deep_gemm's Ascend MXFP8 GEMMs
read), byte ``j`` of word ``i`` = biased exponent of block ``2i + j``, a pair's missing second block 0.
The kernel sees every packed scale as bytes (a ``uint8`` view), so no signed 16-bit arithmetic is needed.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

FMT_MAX = {"e4m3": 448.0, "e2m1": 6.0}
CLAMP_MIN = {"e4m3": 1e-4, "e2m1": 6.0 * 2.0 ** -126}
SF_LAYOUTS = ("row", "col", "ue8m0")
# E2M1 code boundaries on |v| and whether a value on the boundary rounds up (the even code wins ties).
E2M1_BOUNDS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))
UB_TILE_BYTES = 48 * 1024  # input tile budget: x, partials, q and the scales stay well inside dav-3510's UB


def tile_shape(m: int, k: int, bm: int, bk: int, in_bytes: int, per_word: int = 1) -> tuple[int, int]:
    """``(br, bc)``: whole scale blocks (whole words of ``per_word`` packed K-blocks), at most UB_TILE_BYTES of x."""
    kunit = bk * per_word
    kunit = kunit * max(1, -(-64 // kunit))  # at least 64 columns so E2M1 bytes and DMA bursts stay whole
    bc = min(-(-k // kunit) * kunit, max(kunit, (UB_TILE_BYTES // (bm * in_bytes)) // kunit * kunit))
    br = bm * max(1, min(-(-m // bm), UB_TILE_BYTES // (bm * bc * in_bytes)))
    return br, bc


def padded(n: int, elem_bytes: int) -> int:
    """``n`` elements rounded up to whole 32-byte UB blocks (DMA bursts start 32-byte aligned in UB)."""
    per = 32 // elem_bytes
    return -(-n // per) * per


def _nan_max(T, acc, v):
    """``max`` that keeps a NaN, as torch's amax / clamp: the device's float max (like ``fmaxf``, per the
    SIMT API docs) returns the other operand of a NaN, so a NaN block would get a finite scale."""
    return T.if_then_else(T.Or(v > acc, T.isnan(v)), v, acc)


def e4m3_byte(T, v, fmax):
    """E4M3 byte of ``clamp(v, +-fmax)``; a NaN stays NaN (0x7F | sign, as torch writes it): the device's
    saturating FP8 cast, the one TileLang emits, turns NaN into +0."""
    sign = T.Cast("uint8", T.shift_right(T.reinterpret(v, "uint32"), T.uint32(24)))
    clamped = T.if_then_else(v > fmax, T.float32(fmax), T.if_then_else(v < -fmax, T.float32(-fmax), v))
    return T.if_then_else(T.isnan(v), T.bitwise_or(T.bitwise_and(sign, T.uint8(0x80)), T.uint8(0x7F)),
                          T.reinterpret(T.Cast("float8_e4m3fn", clamped), "uint8"))


def _e2m1_code(T, v):
    a = T.abs(v)
    code = T.int32(0)
    for bound, inclusive in E2M1_BOUNDS:
        code = code + T.if_then_else(a >= bound if inclusive else a > bound, 1, 0)
    sign = T.shift_right(T.reinterpret(v, "uint32"), T.uint32(31))
    return code + T.Cast("int32", sign) * 8


@functools.cache
def build(m: int, k: int, in_dtype: str, fmt: str, bm: int, bk: int, round_sf: bool, layout: str, ld: int):
    """The PrimFunc for an ``(m, k)`` input of ``in_dtype`` ("bfloat16"/"float32"); ``ld`` is the
    leading dimension of a column-major scale storage (``Mb`` rows padded)."""
    import tilelang.ascend.language as T

    in_bytes = 2 if in_dtype == "bfloat16" else 4
    br, bc = tile_shape(m, k, bm, bk, in_bytes, 2 if layout == "ue8m0" else 1)
    mb_all, kb_all = -(-m // bm), -(-k // bk)
    nmb, nkb = br // bm, bc // bk
    fmax, cmin = FMT_MAX[fmt], CLAMP_MIN[fmt]
    e2m1 = fmt == "e2m1"
    qk, qbc = (k // 2, bc // 2) if e2m1 else (k, bc)
    if layout == "row":
        sf_shape, sf_dtype, sf_tile = (mb_all, kb_all), "float32", (nmb, padded(nkb, 4))
    elif layout == "col":
        sf_shape, sf_dtype, sf_tile = (kb_all, ld), "float32", (nkb, padded(nmb, 4))
    else:
        sf_shape, sf_dtype, sf_tile = (-(-kb_all // 2), mb_all * 2), "uint8", (nkb // 2, padded(nmb * 2, 1))
    threads = min(256, br * nkb)

    @T.prim_func
    def block_cast(X: T.Tensor((m, k), in_dtype), Q: T.Tensor((m, qk), "uint8"), SF: T.Tensor(sf_shape, sf_dtype)):
        with T.Kernel(T.ceildiv(m, br) * T.ceildiv(k, bc)) as bid:
            x = T.alloc_shared((br, bc), in_dtype)
            part = T.alloc_shared((br, nkb), "float32")
            inv = T.alloc_shared((nmb, nkb), "float32")
            sf = T.alloc_shared(sf_tile, sf_dtype)
            q = T.alloc_shared((br, qbc), "uint8")
            r0 = (bid // T.ceildiv(k, bc)) * br
            c0 = (bid % T.ceildiv(k, bc)) * bc
            rows = T.min(br, m - r0)
            cols = T.min(bc, k - c0)
            T.copy(X[r0:r0 + rows, c0:c0 + cols], x[0:rows, 0:cols])
            with T.SimtVF(threads=threads):
                for r, kk in T.Parallel(br, nkb):
                    amax = T.alloc_var("float32")
                    amax = 0.0
                    for j in T.serial(bk):
                        if kk * bk + j < cols:
                            amax = _nan_max(T, amax, T.abs(T.Cast("float32", x[r, kk * bk + j])))
                    part[r, kk] = amax
            with T.SimtVF(threads=min(256, nmb * nkb)):
                for i, kk in T.Parallel(nmb, nkb):
                    amax = T.alloc_var("float32")
                    amax = cmin
                    for j in T.serial(bm):
                        if i * bm + j < rows:
                            amax = _nan_max(T, amax, part[i * bm + j, kk])
                    s = T.alloc_var("float32")
                    s = amax / fmax
                    if round_sf:
                        s = T.reinterpret(T.bitwise_and(T.reinterpret(s, "int32") + 0x7FFFFF, 0x7F800000), "float32")
                        inv[i, kk] = T.if_then_else(s == 0.0, T.float32(0.0), 1.0 / s)  # a NaN amax rounds to 0
                    else:
                        inv[i, kk] = fmax / amax
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
                            lo = _e2m1_code(T, T.Cast("float32", x[r, c]) * s_inv)
                            hi = _e2m1_code(T, T.Cast("float32", x[r, c + 1]) * s_inv)
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
                T.copy(sf[0:nm, 0:nk], SF[mb0:mb0 + nm, kb0:kb0 + nk])
            elif layout == "col":
                T.copy(sf[0:nk, 0:nm], SF[kb0:kb0 + nk, mb0:mb0 + nm])
            else:
                T.copy(sf[0:T.ceildiv(nk, 2), 0:nm * 2], SF[kb0 // 2:kb0 // 2 + T.ceildiv(nk, 2), mb0 * 2:mb0 * 2 + nm * 2])

    return block_cast


def cast(x, fmt: str, block: tuple[int, int], col: bool, round_sf: bool, packed: bool):
    """``(q, sf)`` of a BF16/FP32 ``(M, K)`` tensor in ``block``-shared scales, sf in the requested layout."""
    import torch

    from . import _launch

    x = x.contiguous()
    m, k = x.shape
    bm, bk = block
    mb, kb = -(-m // bm), -(-k // bk)
    q = torch.empty((m, k // 2) if fmt == "e2m1" else (m, k), dtype=torch.int8 if fmt == "e2m1" else torch.float8_e4m3fn,
                    device=x.device)
    if packed:
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
        func = build(m, k, "bfloat16" if x.dtype == torch.bfloat16 else "float32", fmt, bm, bk, bool(round_sf), layout, ld)
        _launch.launch(func, x, q.view(torch.uint8), kernel_sf)
    return q, sf


def per_token_cast(x, fmt: str, num_per_channels: int, x_block_size=None, use_tma_aligned_col_major_sf: bool = False,
                   round_sf: bool = False, use_packed_ue8m0: bool = False):
    """``tile_kernels.quant.per_token_cast`` for fmt 'e4m3' / 'e2m1'; a ``(data, sf)`` input is dequantised
    to FP32 by the Ascend cast-back kernel first. Packed UE8M0 scales come in the Ascend int16 form."""
    if fmt not in FMT_MAX:
        raise NotImplementedError(f"the Ascend per_token_cast serves fmt 'e4m3' and 'e2m1', not {fmt!r}")
    if isinstance(x, (tuple, list)):
        from .cast_back import cast_back
        x = cast_back(tuple(x), "fp32", x_block_size)
    return cast(x, fmt, (1, num_per_channels), use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)


def per_block_cast(x, fmt: str, block_size: tuple[int, int], use_tma_aligned_col_major_sf: bool = False,
                   round_sf: bool = False, use_packed_ue8m0: bool = False):
    """``tile_kernels.quant.per_block_cast``: one scale per ``block_size = (bm, bk)`` block."""
    return cast(x, fmt, tuple(block_size), use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)


def per_channel_cast(x, fmt: str, num_per_tokens: int, round_sf: bool = False):
    """``tile_kernels.quant.per_channel_cast``: E4M3, one scale per channel per ``num_per_tokens`` tokens."""
    return cast(x, fmt, (num_per_tokens, 1), False, round_sf, False)
