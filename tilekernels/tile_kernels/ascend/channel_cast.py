"""Per-channel E4M3 casts with the data written transposed, on Ascend (TileLang Ascend dialect, vector
cores, SIMT): serves ``tile_kernels.quant.per_channel_cast_and_transpose`` and
``swiglu_forward_and_per_channel_cast_and_transpose`` (with or without the transpose) in one pass each.

A core owns a ``(BR, BC)`` tile of BF16 x (``BR`` tokens: whole ``npt``-token scale blocks, ``BC``
channels). With the SwiGLU prologue it loads the tile's a and b halves instead and makes
``bf16(a / (1 + exp_f32(-a)) * b)`` (a clamped to ``<= clamp``, b to ``[-clamp, clamp]``), the reference's
BF16-rounded SwiGLU. One SIMT thread per (scale block, channel) then takes the block's amax, its scale
and multiplier (``block_cast``'s arithmetic: the reference's, NaN kept) and writes the block's E4M3 bytes
at ``q[channel, token]``, so the tile leaves UB already transposed: no second pass over the data.
Scales are FP32 ``(ceil(T / npt), H)``, row-major, as the reference returns them.

Tokens, channels and the scale rows are symbolic (``T.dynamic``): one lowering per ``npt``, ``round_sf``,
layout and SwiGLU clamp serves every shape.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from .block_cast import FMT_MAX, clamp_gate, clamp_up, e4m3_byte, nan_max, scale_inv, scale_of, swiglu_of

BR, BC = 128, 64  # tokens x channels a tile: x (and a, b) 16 KiB each in UB, q 8 KiB
AMAX_FLOOR = 1e-4  # the reference's E4M3 clamp_min


@functools.cache
def build(npt: int, round_sf: bool, transposed: bool, swiglu: bool = False, clamp: float | None = None):
    """``X (T, H)`` BF16 (``(T, 2H)`` ``[a | b]`` with ``swiglu``) -> ``Q`` E4M3 bytes ``(H, T)`` (``(T, H)``
    unless ``transposed``) and ``SF (ceil(T / npt), H)`` FP32."""
    import tilelang.ascend.language as T

    assert BR % npt == 0
    fmax = FMT_MAX["e4m3"]
    nmb = BR // npt
    m, k, mb = T.dynamic("m"), T.dynamic("k"), T.dynamic("mb")
    x_width = T.dynamic("x_width") if swiglu else k
    q_shape = (k, m) if transposed else (m, k)

    @T.prim_func
    def channel_cast(X: T.Tensor((m, x_width), "bfloat16"), Q: T.Tensor(q_shape, "uint8"),
                     SF: T.Tensor((mb, k), "float32")):
        with T.Kernel(T.ceildiv(m, BR) * T.ceildiv(k, BC)) as bid:
            x = T.alloc_shared((BR, BC), "bfloat16")
            sf = T.alloc_shared((nmb, BC), "float32")
            q = T.alloc_shared((BC, BR) if transposed else (BR, BC), "uint8")
            r0 = (bid // T.ceildiv(k, BC)) * BR
            c0 = (bid % T.ceildiv(k, BC)) * BC
            rows = T.min(BR, m - r0)
            cols = T.min(BC, k - c0)
            if swiglu:
                xa = T.alloc_shared((BR, BC), "bfloat16")
                xb = T.alloc_shared((BR, BC), "bfloat16")
                T.copy(X[r0:r0 + rows, c0:c0 + cols], xa[0:rows, 0:cols])
                T.copy(X[r0:r0 + rows, k + c0:k + c0 + cols], xb[0:rows, 0:cols])
                with T.SimtVF(threads=256):
                    for r, c in T.Parallel(BR, BC):
                        a = T.alloc_var("float32")
                        b = T.alloc_var("float32")
                        a = clamp_gate(T, T.Cast("float32", xa[r, c]), clamp)
                        b = clamp_up(T, T.Cast("float32", xb[r, c]), clamp)
                        x[r, c] = T.Cast("bfloat16", swiglu_of(T, a, b))
            else:
                T.copy(X[r0:r0 + rows, c0:c0 + cols], x[0:rows, 0:cols])
            with T.SimtVF(threads=nmb * BC):
                for i, c in T.Parallel(nmb, BC):
                    amax = T.alloc_var("float32")
                    amax = AMAX_FLOOR
                    for j in T.serial(npt):
                        if i * npt + j < rows:
                            amax = nan_max(T, amax, T.abs(T.Cast("float32", x[i * npt + j, c])))
                    s = T.alloc_var("float32")
                    s = scale_of(T, amax, fmax, round_sf)
                    inv = T.alloc_var("float32")
                    inv = scale_inv(T, s, amax, fmax, round_sf)
                    sf[i, c] = s
                    v = T.alloc_var("float32")
                    for j in T.serial(npt):
                        v = T.Cast("float32", x[i * npt + j, c]) * inv
                        if transposed:
                            q[c, i * npt + j] = e4m3_byte(T, v, fmax)
                        else:
                            q[i * npt + j, c] = e4m3_byte(T, v, fmax)
            T.copy(sf[0:T.ceildiv(rows, npt), 0:cols], SF[r0 // npt:r0 // npt + T.ceildiv(rows, npt), c0:c0 + cols])
            if transposed:
                T.copy(q[0:cols, 0:rows], Q[c0:c0 + cols, r0:r0 + rows])
            else:
                T.copy(q[0:rows, 0:cols], Q[r0:r0 + rows, c0:c0 + cols])

    return channel_cast


def cast(x, npt: int, round_sf: bool, transposed: bool, swiglu: bool = False, clamp: float | None = None):
    """``(q, sf)``: E4M3 ``q`` ``(H, T)`` (``(T, H)`` unless ``transposed``) and FP32 ``sf (ceil(T / npt), H)``
    of BF16 ``x (T, H)``, or of its SwiGLU (rounded to BF16) for ``x (T, 2H)`` with ``swiglu``."""
    import torch

    from .._lib import LIB

    x = x.contiguous()
    m, k = x.shape[0], x.shape[1] // (2 if swiglu else 1)
    q = torch.empty((k, m) if transposed else (m, k), dtype=torch.float8_e4m3fn, device=x.device)
    sf = torch.empty((-(-m // npt), k), dtype=torch.float32, device=x.device)
    if m and k:
        LIB.run_tilelang(build, (npt, bool(round_sf), bool(transposed), bool(swiglu),
                               None if clamp is None else float(clamp)), x, q.view(torch.uint8), sf)
    return q, sf
