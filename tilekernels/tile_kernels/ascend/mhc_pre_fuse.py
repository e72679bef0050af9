"""``mhc_pre_big_fuse`` on Ascend (TileLang Ascend dialect, vector cores): the projection kernel
(mhc_projection), then one fused per-token kernel for the RMS norm, the split into pre / post / comb and the
Sinkhorn of comb, then the apply-mix kernel (mhc_streams) — three launches for the composed ops' five.

The fused kernel runs, per token on one SIMT thread, the same operations in the same order as the step
kernels (``mhc_mix.norm``, ``mhc_mix.split_mixes``, ``mhc_sinkhorn.normalise``), so its results are
bitwise those of the composed public ops on Ascend (upstream's contract for mhc_pre_big_fuse). The token
count is symbolic: one lowering per (m, sinkhorn repeat); the scalars travel as an FP32 tensor.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from .mhc_mix import TILE, scalars, serves_streams, sigmoid
from .mhc_sinkhorn import normalise

THREADS = 128


@functools.cache
def build_pre_mixes(m: int, repeat: int):
    import tilelang.ascend.language as T

    m3, mm = m * (m + 2), m * m
    br = max(1, min(THREADS, TILE // m3))
    t, nx, npre, ncomb = T.dynamic("t"), T.dynamic("nx"), T.dynamic("npre"), T.dynamic("ncomb")
    sinkhorn_of = normalise(T, m, repeat)

    @T.prim_func
    def mhc_pre_mixes(Mul: T.Tensor((nx,), "float32"), Sq: T.Tensor((t,), "float32"), S: T.Tensor((3,), "float32"),
                      B: T.Tensor((m3,), "float32"), P: T.Tensor((5,), "float32"),
                      Pre: T.Tensor((npre,), "float32"), Post: T.Tensor((npre,), "float32"),
                      Comb: T.Tensor((ncomb,), "float32")):
        with T.Kernel(T.ceildiv(t, br)) as bid:
            x = T.alloc_shared((br * m3,), "float32")
            sq = T.alloc_shared((br + 8,), "float32")
            pre = T.alloc_shared((br * m + 8,), "float32")
            post = T.alloc_shared((br * m + 8,), "float32")
            comb = T.alloc_shared((br * mm + 8,), "float32")
            base = T.alloc_shared((m3 + 8,), "float32")
            sp = T.alloc_shared((16,), "float32")  # scale[0..2] | k, rms_eps, post_mult, pre_eps, sinkhorn_eps
            r0 = bid * br
            rows = T.min(br, t - r0)
            T.copy(Mul[r0 * m3:r0 * m3 + rows * m3], x[0:rows * m3])
            T.copy(Sq[r0:r0 + rows], sq[0:rows])
            T.copy(B, base[0:m3])
            T.copy(S, sp[0:3])
            T.copy(P, sp[8:13])
            with T.SimtVF(threads=br):
                for r in T.Parallel(br):  # a token's unused slots compute on stale UB and are never written out
                    f = 1.0 / T.sqrt(sq[r] / sp[8] + sp[9])
                    for j in T.serial(m3):
                        z = T.alloc_var("float32")
                        z = x[r * m3 + j] * f  # the norm kernel's mixes, rounded
                        if j < m:
                            pre[r * m + j] = sigmoid(T, z * sp[0] + base[j]) + sp[11]
                        elif j < 2 * m:
                            post[r * m + j - m] = sigmoid(T, z * sp[1] + base[j]) * sp[10]
                        else:
                            comb[r * mm + j - 2 * m] = z * sp[2] + base[j]
                    sinkhorn_of(comb, r * mm, sp[12])
            T.copy(pre[0:rows * m], Pre[r0 * m:r0 * m + rows * m])
            T.copy(post[0:rows * m], Post[r0 * m:r0 * m + rows * m])
            T.copy(comb[0:rows * mm], Comb[r0 * mm:r0 * mm + rows * mm])

    return mhc_pre_mixes


def pre_big_fuse(residual, fn, scale, base, rms_eps, pre_eps, sinkhorn_eps, post_mult, repeat):
    """``(post (T, m, 1), comb (T, m, m), layer_input (T, H))`` for the flattened tokens of ``residual``."""
    import torch

    from .._lib import LIB
    from ..mhc.norm_fn_kernel import tf32_operand
    from . import mhc_projection, mhc_streams

    m, h = residual.shape[-2:]
    x = residual.reshape(-1, m, h)
    t = x.shape[0]
    dev = residual.device
    pre, post = torch.empty(t, m, 1, device=dev), torch.empty(t, m, 1, device=dev)
    comb = torch.empty(t, m, m, device=dev)
    if not t:
        return post, comb, torch.empty(0, h, dtype=torch.bfloat16, device=dev)
    mul, sqrsum = mhc_projection.projection(x, tf32_operand(fn))
    params = scalars(dev, m * h, rms_eps, post_mult, pre_eps, sinkhorn_eps)
    LIB.run_tilelang(build_pre_mixes, (m, repeat), mul.view(-1), sqrsum.view(-1), scale.contiguous(), base.contiguous(),
                   params, pre.view(-1), post.view(-1), comb.view(-1))
    return post, comb, mhc_streams.apply_mix(x, pre)


def accepts(residual, *_) -> bool:
    return serves_streams(residual.shape[-2])
