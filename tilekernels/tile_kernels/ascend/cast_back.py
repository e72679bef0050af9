"""Block-scaled cast-back on Ascend (TileLang Ascend dialect, vector cores, SIMT): serves
``tile_kernels.quant.cast_back`` (and ``per_token_cast_back``) for E4M3 and packed E2M1 data.

``out = decode(q) * sf`` in FP32, then rounded to BF16 (RNE) or kept, as ``reference/cast.cast_back``.
A core owns a ``(br, bc)`` tile of whole scale blocks, loads the tile's scales into UB next to the data
and decodes with one SIMT thread per (row, K-block). Scales are read in any layout the quant ops
produce: FP32 row-major, FP32 column-major (any leading dimension), and packed UE8M0 in words of
``per_word`` bytes (int16 Ascend pairs or int32 NVIDIA quads), column-major; packed scales are read as
bytes, ``float = byte << 23`` (0xFF NaN, 0x00 2^-127). E2M1 codes decode as ``e == 0 ? m / 2 : (1 + m / 2) * 2^(e - 1)``, exact.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from deepjit.tilelang_route.ub import padded

from ._tiles import tile_shape

OUT_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
UB_BYTES = 248 * 1024  # dav-3510's vector-core Unified Buffer: the data, scale and output tiles together


def _e2m1_value(T, code):
    e = T.bitwise_and(T.shift_right(code, 1), 3)
    mant = T.Cast("float32", T.bitwise_and(code, 1))
    mag = T.if_then_else(e == 0, mant * 0.5,
                         (1.0 + mant * 0.5) * T.reinterpret(T.shift_left(e + 126, 23), "float32"))
    return T.if_then_else(T.bitwise_and(code, 8) != 0, -mag, mag)


@functools.cache
def build(m: int, k: int, e2m1: bool, fmt: str, bm: int, bk: int, layout: str, sf_shape: tuple, per_word: int):
    """``layout``: "row" (SF ``(Mb, Kb)`` FP32), "col" (SF storage ``(Kb, ld)`` FP32) or "packed"
    (SF storage bytes ``(words, ld * per_word)``)."""
    import tilelang.ascend.language as T

    out_dtype = OUT_DTYPES[fmt]
    br, bc = tile_shape(m, k, bm, bk, 4, per_word)
    nmb, nkb = br // bm, bc // bk
    q_dtype, qk, qbc = ("uint8", k // 2, bc // 2) if e2m1 else ("float8_e4m3fn", k, bc)
    sf_dtype = "uint8" if layout == "packed" else "float32"
    sf_tile = {"row": (nmb, padded(nkb, 4)), "col": (nkb, padded(nmb, 4)),
               "packed": (nkb // per_word, padded(nmb * per_word, 1))}[layout]
    threads = min(256, br * nkb)

    @T.prim_func
    def cast_back(Q: T.Tensor((m, qk), q_dtype), SF: T.Tensor(sf_shape, sf_dtype), Out: T.Tensor((m, k), out_dtype)):
        with T.Kernel(T.ceildiv(m, br) * T.ceildiv(k, bc)) as bid:
            q = T.alloc_shared((br, qbc), q_dtype)
            sf = T.alloc_shared(sf_tile, sf_dtype)
            out = T.alloc_shared((br, bc), out_dtype)
            r0 = (bid // T.ceildiv(k, bc)) * br
            c0 = (bid % T.ceildiv(k, bc)) * bc
            rows = T.min(br, m - r0)
            cols = T.min(bc, k - c0)
            mb0, kb0 = r0 // bm, c0 // bk
            nm, nk = T.ceildiv(rows, bm), T.ceildiv(cols, bk)
            qc0 = c0 // 2 if e2m1 else c0
            qcols = cols // 2 if e2m1 else cols
            T.copy(Q[r0:r0 + rows, qc0:qc0 + qcols], q[0:rows, 0:qcols])
            if layout == "row":
                T.copy(SF[mb0:mb0 + nm, kb0:kb0 + nk], sf[0:nm, 0:nk])
            elif layout == "col":
                T.copy(SF[kb0:kb0 + nk, mb0:mb0 + nm], sf[0:nk, 0:nm])
            else:
                nw = T.ceildiv(nk, per_word)
                T.copy(SF[kb0 // per_word:kb0 // per_word + nw, mb0 * per_word:(mb0 + nm) * per_word],
                       sf[0:nw, 0:nm * per_word])
            with T.SimtVF(threads=threads):
                for r, kk in T.Parallel(br, nkb):
                    s = T.alloc_var("float32")
                    if layout == "row":
                        s = sf[r // bm, kk]
                    elif layout == "col":
                        s = sf[kk, r // bm]
                    else:
                        byte = sf[kk // per_word, (r // bm) * per_word + kk % per_word]
                        b = T.Cast("int32", byte)  # UE8M0: 0xFF is NaN, 0x00 the subnormal 2^-127
                        s = T.reinterpret(T.if_then_else(b == 255, 0x7FC00000, T.if_then_else(
                            b == 0, 0x00400000, T.shift_left(b, 23))), "float32")
                    for j in T.serial(bk):
                        c = kk * bk + j
                        if e2m1:
                            code = T.bitwise_and(T.shift_right(T.Cast("int32", q[r, c // 2]), (c % 2) * 4), 15)
                            out[r, c] = T.Cast(out_dtype, _e2m1_value(T, code) * s)
                        else:
                            out[r, c] = T.Cast(out_dtype, T.Cast("float32", q[r, c]) * s)
            T.copy(out[0:rows, 0:cols], Out[r0:r0 + rows, c0:c0 + cols])

    return cast_back


def _kernel_form(sf):
    """``(per_word, layout)`` of the scales as the kernel reads them."""
    import torch

    if sf.dtype in (torch.int16, torch.int32):
        return sf.element_size(), "packed"
    return 1, "col" if sf.stride(0) == 1 and sf.shape[1] > 1 else "row"


def accepts(x, fmt: str, x_block_size: tuple[int, int], x_special_fmt=None) -> bool:
    """Whether a core's tiles fit UB. The smallest tile is ``bm`` rows by one scale word of K-blocks: with
    int32-packed (128, 128) scales 128 x 512, whose FP32 output alone is 256 KiB (the reference serves it)."""
    import torch

    q, sf = x
    e2m1 = q.dtype == torch.int8
    m, k = q.shape[0], q.shape[1] * (2 if e2m1 else 1)
    bm, bk = x_block_size
    per_word, layout = _kernel_form(sf)
    br, bc = tile_shape(m, k, bm, bk, 4, per_word)
    nmb, nkb = br // bm, bc // bk
    sf_bytes = {"row": nmb * padded(nkb, 4) * 4, "col": nkb * padded(nmb, 4) * 4,
                "packed": -(-nkb // per_word) * padded(nmb * per_word, 1)}[layout]
    out_bytes = 4 if fmt == "fp32" else 2
    return br * padded(bc // 2 if e2m1 else bc, 1) + sf_bytes + br * padded(bc, out_bytes) * out_bytes <= UB_BYTES


def cast_back(x, fmt: str, x_block_size: tuple[int, int], x_special_fmt=None):
    """``tile_kernels.quant.cast_back`` for E4M3 / E2M1 ``(data, sf)`` (E5M6 is not served here)."""
    import torch

    from .._lib import LIB

    if x_special_fmt is not None:
        raise NotImplementedError(f"the Ascend cast_back does not serve x_special_fmt={x_special_fmt!r}")
    q, sf = x
    q = q.contiguous()
    e2m1 = q.dtype == torch.int8
    m, k = q.shape[0], q.shape[1] * (2 if e2m1 else 1)
    bm, bk = x_block_size
    out = torch.empty((m, k), dtype=torch.float32 if fmt == "fp32" else torch.bfloat16, device=q.device)
    if not (m and k):
        return out
    if sf.dtype in (torch.int16, torch.int32):  # packed UE8M0, column-major: storage (words, ld)
        if sf.shape[0] > 1 and sf.stride(0) != 1:  # row-major words (the NVIDIA form): to column-major first
            sf = sf.t().contiguous().t()
        per_word = sf.element_size()
        ld = sf.stride(1) if sf.shape[1] > 1 else sf.shape[0]
        storage = torch.as_strided(sf, (sf.shape[1], ld), (ld, 1))
        kernel_sf, layout = storage.view(torch.uint8), "packed"
    elif sf.stride(0) == 1 and sf.shape[1] > 1:  # FP32 column-major: storage (Kb, ld)
        kernel_sf = torch.as_strided(sf, (sf.shape[1], sf.stride(1)), (sf.stride(1), 1))
        layout, per_word = "col", 1
    else:
        kernel_sf, layout, per_word = sf.contiguous(), "row", 1
    LIB.run_tilelang(build, (m, k, e2m1, fmt, bm, bk, layout, tuple(kernel_sf.shape), per_word),
                   q.view(torch.uint8) if e2m1 else q, kernel_sf, out)
    return out
