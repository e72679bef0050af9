"""Reducing the fused per-expert layout back to tokens on Ascend (TileLang Ascend dialect, vector cores,
SIMT): serves ``tile_kernels.moe.reduce_fused`` for plain BF16/FP32 ``x`` with optional ``topk_weights``
(no ``x_sf`` / ``sf`` / ``fp8_format`` / ``out``).

Per token, in k order, ``acc = fma(x[pos], w[t, k], acc)`` in FP32 from 0 with one rounding per step
(``fmaf``, as ``reference/moe.reduce_fused``), slots ``< 0`` skipped, then a cast to x's dtype (RNE).
A core owns a token tile and a column tile; each token's k rows are gathered into UB by DMA, then one
SIMT pass accumulates them.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from .block_cast import padded

COL_TILE = 1024


@functools.cache
def build(num_rows: int, h: int, t: int, k: int, dtype: str, weighted: bool):
    import tilelang.ascend.language as T

    hc = min(h, COL_TILE)
    br = max(1, min(t, 16))

    @T.prim_func
    def reduce_fused(X: T.Tensor((num_rows, h), dtype), W: T.Tensor((t, k), "float32"), Pos: T.Tensor((t, k), "int32"),
                     Out: T.Tensor((t, h), dtype)):
        with T.Kernel(T.ceildiv(t, br) * T.ceildiv(h, hc)) as bid:
            xs = T.alloc_shared((k, hc), dtype)
            w = T.alloc_shared((br, padded(k, 4)), "float32")
            pos = T.alloc_shared((br, padded(k, 4)), "int32")
            out = T.alloc_shared((br, hc), dtype)
            r0 = (bid // T.ceildiv(h, hc)) * br
            c0 = (bid % T.ceildiv(h, hc)) * hc
            rows = T.min(br, t - r0)
            cols = T.min(hc, h - c0)
            T.copy(Pos[r0:r0 + rows, :], pos[0:rows, 0:k])
            T.copy(W[r0:r0 + rows, :], w[0:rows, 0:k])
            for r in T.serial(rows):
                for j in T.serial(k):
                    p = pos[r, j]
                    if p >= 0:
                        T.copy(X[p, c0:c0 + cols], xs[j, 0:cols])
                with T.SimtVF(threads=min(hc, 256)):
                    for c in T.Parallel(hc):
                        acc = T.alloc_var("float32")
                        acc = 0.0
                        for j in T.serial(k):
                            if pos[r, j] >= 0:
                                acc = T.call_extern("float32", "fmaf", T.Cast("float32", xs[j, c]),
                                                    w[r, j] if weighted else T.float32(1.0), acc)
                        out[r, c] = T.Cast(dtype, acc)
            T.copy(out[0:rows, 0:cols], Out[r0:r0 + rows, c0:c0 + cols])

    return reduce_fused


def reduce_fused(x, topk_weights, token_topk_to_pos, fp8_format: str = "", sf=None, out=None):
    """``tile_kernels.moe.reduce_fused`` -> ``(T, H)`` in x's dtype."""
    import torch

    from . import _launch

    if isinstance(x, (tuple, list)) or fp8_format or sf is not None or out is not None:
        raise NotImplementedError("the Ascend reduce_fused serves plain x without x_sf, sf, fp8_format or out")
    t, k = token_topk_to_pos.shape
    h = x.shape[1]
    result = torch.empty((t, h), dtype=x.dtype, device=x.device)
    if t and h:
        weighted = topk_weights is not None
        w = topk_weights.float().contiguous() if weighted else torch.zeros((t, k), device=x.device)
        func = build(x.shape[0], h, t, k, "bfloat16" if x.dtype == torch.bfloat16 else "float32", weighted)
        _launch.launch(func, x.contiguous(), w, token_topk_to_pos.contiguous(), result)
    return result
