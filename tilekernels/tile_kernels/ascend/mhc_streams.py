"""The mHC residual-stream ops on Ascend (TileLang Ascend dialect, vector cores): serves ``expand_to_mhc``,
``mhc_pre_apply_mix`` and ``mhc_post`` (forward).

- expand: ``out[t, j] = hidden[t]`` for each of the m streams; rows move as bytes (any dtype, every bit
  kept): a core stages a ``(rows, bytes)`` tile in UB and writes it to each stream by DMA.
- pre apply mix: ``out[t, c] = sum_j x[t, j, c] * mix[t, j]`` (BF16 x, FP32 mix, FP32 products summed in
  stream order from 0, then RNE to BF16), as ``(x.float() * mix).sum(-2)``.
- post: ``out[t, n, c] = x[t, c] * post[t, n] + sum_i comb[t, i, n] * residual[t, i, c]`` (FP32, the sum in
  stream order, then RNE to BF16), as ``reference/mhc.mhc_post_ref``.
A core owns a tile of tokens and a column tile; a SIMT pass over the columns per token. Token count and
hidden size are symbolic (``T.dynamic``): one lowering per stream count m (expand: one for all).
NaN and +-Inf propagate through the FP32 arithmetic as in torch.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from .mhc_mix import serves_streams

COL_TILE = 1024  # BF16 columns per tile
EXPAND_TILE_BYTES = 16 * 1024


@functools.cache
def build_expand():
    import tilelang.ascend.language as T

    t, rb, w = T.dynamic("t"), T.dynamic("rb"), T.dynamic("w")  # tokens, row bytes, m * row bytes
    cb, br = EXPAND_TILE_BYTES, 4

    @T.prim_func
    def mhc_expand(X: T.Tensor((t, rb), "uint8"), Out: T.Tensor((t, w), "uint8")):
        with T.Kernel(T.ceildiv(t, br) * T.ceildiv(rb, cb)) as bid:
            x = T.alloc_shared((br, cb), "uint8")
            r0 = (bid // T.ceildiv(rb, cb)) * br
            c0 = (bid % T.ceildiv(rb, cb)) * cb
            rows = T.min(br, t - r0)
            cols = T.min(cb, rb - c0)
            T.copy(X[r0:r0 + rows, c0:c0 + cols], x[0:rows, 0:cols])
            for j in T.serial(w // rb):
                T.copy(x[0:rows, 0:cols], Out[r0:r0 + rows, j * rb + c0:j * rb + c0 + cols])

    return mhc_expand


def expand(hidden, mhc_mult, out):
    """``(..., H)`` -> ``(..., mhc_mult, H)``, into ``out`` when given (contiguous)."""
    import torch

    from .._lib import LIB

    if out is None:
        out = torch.empty((*hidden.shape[:-1], mhc_mult, hidden.shape[-1]), dtype=hidden.dtype, device=hidden.device)
    if out.numel():
        rb = hidden.shape[-1] * hidden.element_size()
        t = hidden.numel() // hidden.shape[-1]
        LIB.run_tilelang(build_expand, (), hidden.contiguous().view(torch.uint8).reshape(t, rb),
                       out.view(torch.uint8).reshape(t, mhc_mult * rb))
    return out


@functools.cache
def build_apply_mix(m: int):
    import tilelang.ascend.language as T

    tm, t, h = T.dynamic("tm"), T.dynamic("t"), T.dynamic("h")  # t * m, tokens, hidden
    hc, br = COL_TILE, 4

    @T.prim_func
    def mhc_apply_mix(X: T.Tensor((tm, h), "bfloat16"), Mix: T.Tensor((tm,), "float32"),
                      Out: T.Tensor((t, h), "bfloat16")):
        with T.Kernel(T.ceildiv(t, br) * T.ceildiv(h, hc)) as bid:
            x = T.alloc_shared((br * m, hc), "bfloat16")
            mix = T.alloc_shared((br * m + 8,), "float32")
            out = T.alloc_shared((br, hc), "bfloat16")
            r0 = (bid // T.ceildiv(h, hc)) * br
            c0 = (bid % T.ceildiv(h, hc)) * hc
            rows = T.min(br, t - r0)
            cols = T.min(hc, h - c0)
            T.copy(X[r0 * m:r0 * m + rows * m, c0:c0 + cols], x[0:rows * m, 0:cols])
            T.copy(Mix[r0 * m:r0 * m + rows * m], mix[0:rows * m])
            for r in T.serial(rows):
                with T.SimtVF(threads=256):
                    for c in T.Parallel(hc):
                        acc = T.alloc_var("float32")
                        acc = 0.0
                        for j in T.serial(m):
                            acc = acc + T.Cast("float32", x[r * m + j, c]) * mix[r * m + j]
                        out[r, c] = T.Cast("bfloat16", acc)
            T.copy(out[0:rows, 0:cols], Out[r0:r0 + rows, c0:c0 + cols])

    return mhc_apply_mix


def apply_mix_accepts(x, *_) -> bool:
    return serves_streams(x.shape[-2])


def apply_mix(x, mix):
    """``sum_m mix_m * x_m``: ``x (..., m, H)`` BF16, ``mix (..., m, 1)`` FP32 -> ``(..., H)`` BF16."""
    import torch

    from .._lib import LIB

    m, h = x.shape[-2:]
    out = torch.empty((*x.shape[:-2], h), dtype=torch.bfloat16, device=x.device)
    if out.numel():
        t = out.numel() // h
        LIB.run_tilelang(build_apply_mix, (m,), x.contiguous().view(t * m, h), mix.contiguous().float().view(t * m),
                       out.view(t, h))
    return out


@functools.cache
def build_post(m: int):
    import tilelang.ascend.language as T

    tm, tmm, t, h = T.dynamic("tm"), T.dynamic("tmm"), T.dynamic("t"), T.dynamic("h")
    hc, br = COL_TILE, 2

    @T.prim_func
    def mhc_post(X: T.Tensor((t, h), "bfloat16"), Res: T.Tensor((tm, h), "bfloat16"), Post: T.Tensor((tm,), "float32"),
                 Comb: T.Tensor((tmm,), "float32"), Out: T.Tensor((tm, h), "bfloat16")):
        with T.Kernel(T.ceildiv(t, br) * T.ceildiv(h, hc)) as bid:
            x = T.alloc_shared((br, hc), "bfloat16")
            res = T.alloc_shared((br * m, hc), "bfloat16")
            out = T.alloc_shared((br * m, hc), "bfloat16")
            post = T.alloc_shared((br * m + 8,), "float32")
            comb = T.alloc_shared((br * m * m + 8,), "float32")
            r0 = (bid // T.ceildiv(h, hc)) * br
            c0 = (bid % T.ceildiv(h, hc)) * hc
            rows = T.min(br, t - r0)
            cols = T.min(hc, h - c0)
            T.copy(X[r0:r0 + rows, c0:c0 + cols], x[0:rows, 0:cols])
            T.copy(Res[r0 * m:r0 * m + rows * m, c0:c0 + cols], res[0:rows * m, 0:cols])
            T.copy(Post[r0 * m:r0 * m + rows * m], post[0:rows * m])
            T.copy(Comb[r0 * m * m:r0 * m * m + rows * m * m], comb[0:rows * m * m])
            for r in T.serial(rows):
                with T.SimtVF(threads=256):
                    for c in T.Parallel(hc):
                        xv = T.Cast("float32", x[r, c])
                        for n in T.serial(m):
                            acc = T.alloc_var("float32")
                            acc = 0.0
                            for i in T.serial(m):
                                acc = acc + comb[r * m * m + i * m + n] * T.Cast("float32", res[r * m + i, c])
                            out[r * m + n, c] = T.Cast("bfloat16", xv * post[r * m + n] + acc)
            T.copy(out[0:rows * m, 0:cols], Out[r0 * m:r0 * m + rows * m, c0:c0 + cols])

    return mhc_post


def post_accepts(x, residual, *_) -> bool:
    return serves_streams(residual.shape[2])


def post(x, residual, post_layer_mix, comb_res_mix, out):
    """``mhc_post_fwd``: ``(s, t, m, h)`` BF16, into ``out`` when given."""
    import torch

    from .._lib import LIB

    s, t, m, h = residual.shape
    res = out if out is not None and out.is_contiguous() else torch.empty((s, t, m, h), dtype=torch.bfloat16,
                                                                           device=residual.device)
    if res.numel():
        n = s * t
        LIB.run_tilelang(build_post, (m,), x.contiguous().view(n, h), residual.contiguous().view(n * m, h),
                       post_layer_mix.contiguous().view(n * m), comb_res_mix.contiguous().view(n * m * m),
                       res.view(n * m, h))
    return res if out is None or res is out else out.copy_(res)
