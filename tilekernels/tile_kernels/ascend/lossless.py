"""Lossless FP4 -> E4M3 re-quantisation on Ascend (TileLang Ascend dialect, vector cores, SIMT): serves
``tile_kernels.quant.per_block_cast_lossless``, bit-exact with the reference (quant/lossless._lossless_ref).

Each output block's exponent is ``e_out = max(e_in of its input blocks) - 6``, at least 0; each FP4 value is
multiplied by ``2^(e_in - e_out)`` (the factor built from its bits, ``(e_in - e_out + 127) << 23``, as the
reference) and cast to E4M3 (exact for every such value: at most 6 * 2^6 = 384). A core owns a tile of whole
output blocks: it stages the packed FP4 bytes and the input scales' exponent bytes, one SIMT pass makes the
tile's ``e_out`` (input blocks past the tensor's edge left out), a second writes the E4M3 bytes.

Input scales read: FP32 row-major (exponent = bits 23..30) or packed UE8M0 words (int32 quads or int16
pairs, column-major storage; byte j of a word is block j's). The kernel writes the output scales FP32 row-major
(``e_out << 23``); column-major / packed output layouts are laid out from those by ``reference/cast.format_sf``
(device ops on the ``(Mb, Kb)`` scales only).

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from deepjit.tilelang_route.ub import padded

from .block_cast import e4m3_byte
from .cast_back import _e2m1_value


def _tile(ob: tuple[int, int]) -> tuple[int, int]:
    """Rows x columns a core owns: whole output blocks, at most 32 x 256 unless a block is larger."""
    return ob[0] * max(1, 32 // ob[0]), ob[1] * max(1, 256 // ob[1])


@functools.cache
def build(m: int, k: int, ib: tuple[int, int], ob: tuple[int, int], layout: str, sf_shape: tuple, per_word: int):
    """``layout``: "row" (SF FP32 ``(Mb_in, Kb_in)``) or "packed4" / "packed2" (SF storage ``(words, ld)`` of
    int32 / int16 words, ``per_word`` blocks each)."""
    import tilelang.ascend.language as T

    br, bc = _tile(ob)
    ibm, ibk = ib
    obm, obk = ob
    nib_m, nib_k = br // ibm, bc // ibk  # input blocks a tile holds
    nob_m, nob_k = br // obm, bc // obk
    mb_out, kb_out = -(-m // obm), -(-k // obk)
    sf_dtype = {"row": "float32", "packed4": "int32", "packed2": "int16"}[layout]
    sf_tile = (nib_m, padded(nib_k, 4)) if layout == "row" else (-(-nib_k // per_word), padded(nib_m, 32 // per_word))
    threads = min(256, br * nib_k)

    @T.prim_func
    def per_block_cast_lossless(Q: T.Tensor((m, k // 2), "uint8"), SF: T.Tensor(sf_shape, sf_dtype),
                                Out: T.Tensor((m, k // 4), "int32"), SFOut: T.Tensor((mb_out, kb_out), "int32")):
        with T.Kernel(T.ceildiv(m, br) * T.ceildiv(k, bc)) as bid:
            q = T.alloc_shared((br, bc // 2), "uint8")
            sf = T.alloc_shared(sf_tile, sf_dtype)
            e_in = T.alloc_shared((nib_m, padded(nib_k, 4)), "int32")
            e_out = T.alloc_shared((nob_m, padded(nob_k, 8)), "int32")
            out = T.alloc_shared((br, bc // 4), "int32")  # E4M3 bytes as words: SIMT stores no bytes
            r0 = (bid // T.ceildiv(k, bc)) * br
            c0 = (bid % T.ceildiv(k, bc)) * bc
            rows = T.min(br, m - r0)
            cols = T.min(bc, k - c0)
            ib_m0, ib_k0 = r0 // ibm, c0 // ibk
            n_im, n_ik = T.ceildiv(rows, ibm), T.ceildiv(cols, ibk)
            T.copy(Q[r0:r0 + rows, c0 // 2:c0 // 2 + cols // 2], q[0:rows, 0:cols // 2])
            if layout == "row":
                T.copy(SF[ib_m0:ib_m0 + n_im, ib_k0:ib_k0 + n_ik], sf[0:n_im, 0:n_ik])
            else:
                nw = T.ceildiv(n_ik, per_word)
                T.copy(SF[ib_k0 // per_word:ib_k0 // per_word + nw, ib_m0:ib_m0 + n_im], sf[0:nw, 0:n_im])
            with T.SimtVF(threads=min(256, nib_m * nib_k)):
                for bm, bk in T.Parallel(nib_m, nib_k):
                    if layout == "row":
                        e_in[bm, bk] = T.bitwise_and(T.shift_right(T.reinterpret(sf[bm, bk], "int32"), 23), 0xFF)
                    else:
                        word = T.Cast("int32", sf[bk // per_word, bm])  # byte j of a word: block j
                        e_in[bm, bk] = T.bitwise_and(T.shift_right(word, 8 * (bk % per_word)), 0xFF)
            with T.SimtVF(threads=min(256, nob_m * nob_k)):
                for om, ok in T.Parallel(nob_m, nob_k):
                    e = T.alloc_var("int32")
                    e = 0
                    for i in T.serial(obm // ibm):
                        for j in T.serial(obk // ibk):
                            bm = om * (obm // ibm) + i
                            bk = ok * (obk // ibk) + j
                            if T.And(bm < n_im, bk < n_ik):
                                e = T.max(e, e_in[bm, bk])
                    e_out[om, ok] = T.max(e - 6, 0)
            with T.SimtVF(threads=threads):
                for r, bk in T.Parallel(br, nib_k):
                    shift = e_in[r // ibm, bk] - e_out[r // obm, bk * ibk // obk] + 127
                    factor = T.reinterpret(T.shift_left(shift, 23), "float32")
                    for j in T.serial(ibk // 4):  # 4 E4M3 bytes (2 FP4 bytes) a word, low byte first
                        c = bk * ibk + 4 * j
                        word = T.alloc_var("int32")
                        word = 0
                        for b in T.serial(4):
                            code = T.bitwise_and(T.shift_right(T.Cast("int32", q[r, (c + b) // 2]), (b % 2) * 4), 15)
                            e4m3 = T.Cast("int32", e4m3_byte(T, _e2m1_value(T, code) * factor, 448.0))
                            word = T.bitwise_or(word, T.shift_left(e4m3, 8 * b))
                        out[r, c // 4] = word
            T.copy(out[0:rows, 0:cols // 4], Out[r0:r0 + rows, c0 // 4:c0 // 4 + cols // 4])
            with T.SimtVF(threads=min(256, nob_m * nob_k)):
                for om, ok in T.Parallel(nob_m, nob_k):
                    e_out[om, ok] = T.shift_left(e_out[om, ok], 23)
            T.copy(e_out[0:T.ceildiv(rows, obm), 0:T.ceildiv(cols, obk)],
                   SFOut[r0 // obm:r0 // obm + T.ceildiv(rows, obm), c0 // obk:c0 // obk + T.ceildiv(cols, obk)])

    return per_block_cast_lossless


def _scale_bytes(sf):
    """``(kernel view, layout, per_word)`` of an input sf the kernel reads, or None (the reference's form)."""
    import torch

    if sf.dtype == torch.float32:
        return (sf, "row", 1) if sf.is_contiguous() else None
    if sf.dtype in (torch.int32, torch.int16) and (sf.shape[0] <= 1 or sf.stride(0) == 1):
        ld = sf.stride(1) if sf.shape[1] > 1 else sf.shape[0]
        storage = torch.as_strided(sf, (sf.shape[1], ld), (ld, 1))
        return storage, f"packed{sf.element_size()}", sf.element_size()
    return None


def accepts(q, sf, ib, ob, col, packed) -> bool:
    """Rows to cast, input scales the kernel reads, input blocks of whole 4-byte output words (the last pass
    writes 4 E4M3 bytes a word, ``ib[1] // 4`` words a block) and output blocks whose tile fits UB (at most
    128 x 256)."""
    return (q.shape[0] > 0 and ib[1] % 4 == 0 and _scale_bytes(sf) is not None and ob[0] <= 128
            and ob[1] <= 256)


def per_block_cast_lossless(q, sf, ib, ob, use_tma_aligned_col_major_sf, use_packed_ue8m0):
    """``(E4M3 data (M, K), scales in the requested layout)``, as quant/lossless._lossless_ref."""
    import torch

    from .._lib import LIB
    from ..reference.cast import format_sf

    m, k = q.shape[0], q.shape[1] * 2
    kernel_sf, layout, per_word = _scale_bytes(sf)
    data = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=q.device)
    sf_out = torch.empty((-(-m // ob[0]), -(-k // ob[1])), dtype=torch.int32, device=q.device)
    if m and k:
        LIB.run_tilelang(build, (m, k, tuple(ib), tuple(ob), layout, tuple(kernel_sf.shape), per_word),
                       q.contiguous().view(torch.uint8), kernel_sf, data.view(torch.int32), sf_out)
    return data, format_sf(sf_out.view(torch.float32), use_tma_aligned_col_major_sf, use_packed_ue8m0)
