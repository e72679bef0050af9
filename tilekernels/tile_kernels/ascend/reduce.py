"""Reducing the fused per-expert layout back to tokens on Ascend (TileLang Ascend dialect, vector cores,
SIMT): serves ``tile_kernels.moe.reduce_fused`` for BF16/FP32/E4M3 ``x`` with every option (``topk_weights``,
a per-row ``x_sf``, the output scale ``sf``, ``fp8_format='e4m3'``, ``out``).

Per token, in k order, ``acc = fma(x[pos], w[t, k] * x_sf[pos], acc)`` in FP32 from 0 with one rounding per
step (``fmaf``, as ``reference/moe.reduce_fused``; the scale product rounded first), slots ``< 0`` skipped,
then ``acc * sf[0]`` and a cast to x's dtype (RNE) or E4M3 (torch's: saturating, NaN kept).
A core owns a token tile and a column tile; each token's k rows are gathered into UB by DMA, then one
SIMT pass accumulates them.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from deepjit.tilelang_route.ub import padded

from .block_cast import e4m3_byte

COL_TILE = 1024


def _scale_of(weighted: bool, x_scaled: bool):
    def scale(T, w, xsf, r, j):  # the reference's s = w * x_sf (FP32 product), 1 or either alone
        if weighted and x_scaled:
            return w[r, j] * xsf[j, 0]
        if weighted:
            return w[r, j]
        return xsf[j, 0] if x_scaled else T.float32(1.0)
    return scale


@functools.cache
def build(num_rows: int, h: int, t: int, k: int, dtype: str, weighted: bool, x_scaled: bool = False,
          out_scaled: bool = False, out_e4m3: bool = False):
    """``dtype``: x's element type ("bfloat16", "float32" or "float8_e4m3fn"); ``x_scaled``: a per-row
    FP32 x_sf; ``out_scaled``: the output scale sf[0]; ``out_e4m3``: E4M3 output (written as bytes)."""
    import tilelang.ascend.language as T

    hc = min(h, COL_TILE)
    br = max(1, min(t, 16))
    out_dtype = "uint8" if out_e4m3 else dtype
    _scale = _scale_of(weighted, x_scaled)

    @T.prim_func
    def reduce_fused(X: T.Tensor((num_rows, h), dtype), W: T.Tensor((t, k), "float32"), Pos: T.Tensor((t, k), "int32"),
                     XSf: T.Tensor((num_rows if x_scaled else 1,), "float32"), Sf: T.Tensor((1,), "float32"),
                     Out: T.Tensor((t, h), out_dtype)):
        with T.Kernel(T.ceildiv(t, br) * T.ceildiv(h, hc)) as bid:
            xs = T.alloc_shared((k, hc), dtype)
            w = T.alloc_shared((br, padded(k, 4)), "float32")
            pos = T.alloc_shared((br, padded(k, 4)), "int32")
            xsf = T.alloc_shared((k, 8), "float32")  # a row's x_sf, each at the start of its own 32-byte block
            sf = T.alloc_shared((8,), "float32")
            out = T.alloc_shared((br, hc), out_dtype)
            r0 = (bid // T.ceildiv(h, hc)) * br
            c0 = (bid % T.ceildiv(h, hc)) * hc
            rows = T.min(br, t - r0)
            cols = T.min(hc, h - c0)
            T.copy(Pos[r0:r0 + rows, :], pos[0:rows, 0:k])
            T.copy(W[r0:r0 + rows, :], w[0:rows, 0:k])
            if out_scaled:
                T.copy(Sf, sf[0:1])
            for r in T.serial(rows):
                for j in T.serial(k):
                    p = pos[r, j]
                    if T.And(p >= 0, p < num_rows):  # a position past x is skipped like -1 (no host check)
                        T.copy(X[p, c0:c0 + cols], xs[j, 0:cols])
                        if x_scaled:
                            T.copy(XSf[p:p + 1], xsf[j, 0:1])
                with T.SimtVF(threads=min(hc, 256)):
                    for c in T.Parallel(hc):
                        acc = T.alloc_var("float32")
                        acc = 0.0
                        for j in T.serial(k):
                            if T.And(pos[r, j] >= 0, pos[r, j] < num_rows):
                                acc = T.call_extern("float32", "fmaf", T.Cast("float32", xs[j, c]), _scale(T, w, xsf, r, j),
                                                    acc)
                        if out_scaled:
                            acc = acc * sf[0]
                        if out_e4m3:
                            out[r, c] = e4m3_byte(T, acc, 448.0)
                        else:
                            out[r, c] = T.Cast(dtype, acc)
            T.copy(out[0:rows, 0:cols], Out[r0:r0 + rows, c0:c0 + cols])

    return reduce_fused


DTYPES = {"torch.bfloat16": "bfloat16", "torch.float32": "float32", "torch.float8_e4m3fn": "float8_e4m3fn"}


def reduce_fused(x, topk_weights, token_topk_to_pos, fp8_format: str = "", sf=None, out=None, x_sf=None):
    """``tile_kernels.moe.reduce_fused`` -> ``(T, H)`` in x's dtype (E4M3 with ``fp8_format='e4m3'``),
    into ``out`` when given (contiguous)."""
    import torch

    from .._lib import LIB

    t, k = token_topk_to_pos.shape
    h = x.shape[1]
    e4m3 = fp8_format == "e4m3"
    if out is None:
        out = torch.empty((t, h), dtype=torch.float8_e4m3fn if e4m3 else x.dtype, device=x.device)
    if t and h:
        weighted = topk_weights is not None
        w = topk_weights.float().contiguous() if weighted else torch.zeros((t, k), device=x.device)
        args = (x.shape[0], h, t, k, DTYPES[str(x.dtype)], weighted, x_sf is not None, sf is not None, e4m3)
        one = torch.zeros(1, device=x.device)
        LIB.run_tilelang(build, args, x.contiguous(), w, token_topk_to_pos.contiguous(),
                       one if x_sf is None else x_sf.contiguous(), one if sf is None else sf.contiguous(),
                       out.view(torch.uint8) if e4m3 else out)
    return out
