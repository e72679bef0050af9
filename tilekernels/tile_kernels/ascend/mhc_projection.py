"""The mHC pre-norm projection on Ascend (TileLang Ascend dialect, vector cores, SIMT): serves the table op
``mhc_projection`` (the GEMM step of ``mhc_pre_norm_fn`` and ``mhc_pre_big_fuse``).

For the flattened BF16 residual ``r (T, K = m * H)`` and FP32 ``fn (m3, K)`` (TF32 values, as the callers
pass them): ``mul = r @ fn.T`` and ``sqrsum = sum_k r^2``, FP32. Each product of a BF16 and a TF32 value is
exact in FP32, so only the summation order differs from the reference's GEMM (upstream compares the
normalised result at 1e-3). A core owns a tile of tokens and walks K in tiles, staging ``r`` and ``fn``
in UB; one SIMT thread per output (``m3`` dot products and the square sum per token) accumulates its
tile's columns in order with a compensated (Kahan) sum carried across the tiles (K = 28672 at DeepSeek's
shape: a plain running sum would drift past the reference's GEMM). Both dimensions are symbolic: one lowering per ``m3``. NaN and +-Inf propagate
through the sums as in torch.

The cube would serve the dot products faster (``fn`` split exactly into two BF16 halves); this first
kernel keeps to the vector cores.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from .mhc_mix import MAX_STREAMS, compensated_sum

K_TILE = 256
TOKENS = 8  # tokens a core owns


@functools.cache
def build(m3: int):
    import tilelang.ascend.language as T

    t, k, tm3 = T.dynamic("t"), T.dynamic("k"), T.dynamic("tm3")
    kc, br = K_TILE, TOKENS
    outs = br * (m3 + 1)  # m3 dot products and the square sum of each token
    k_sum = compensated_sum(T)

    @T.prim_func
    def mhc_projection(R: T.Tensor((t, k), "bfloat16"), Fn: T.Tensor((m3, k), "float32"),
                       Mul: T.Tensor((tm3,), "float32"), Sq: T.Tensor((t,), "float32")):
        with T.Kernel(T.ceildiv(t, br)) as bid:
            r = T.alloc_shared((br, kc), "bfloat16")
            fn = T.alloc_shared((m3, kc), "float32")
            mul = T.alloc_shared((br * m3 + 8,), "float32")
            sq = T.alloc_shared((br + 8,), "float32")
            emul = T.alloc_shared((br * m3 + 8,), "float32")  # the sums' carried rounding errors
            esq = T.alloc_shared((br + 8,), "float32")
            r0 = bid * br
            rows = T.min(br, t - r0)
            with T.SimtVF(threads=outs):
                for o in T.Parallel(outs):
                    if o < br * m3:
                        mul[o] = 0.0
                        emul[o] = 0.0
                    else:
                        sq[o - br * m3] = 0.0
                        esq[o - br * m3] = 0.0
            for ki in T.serial(T.ceildiv(k, kc)):
                k0 = ki * kc
                cols = T.min(kc, k - k0)
                T.copy(R[r0:r0 + rows, k0:k0 + cols], r[0:rows, 0:cols])
                T.copy(Fn[0:m3, k0:k0 + cols], fn[0:m3, 0:cols])
                with T.SimtVF(threads=outs):
                    for o in T.Parallel(outs):
                        if o < br * m3:
                            k_sum(cols, lambda c, o=o: T.Cast("float32", r[o // m3, c]) * fn[o % m3, c], mul, emul, o)
                        else:
                            k_sum(cols, lambda c, o=o: T.Cast("float32", r[o - br * m3, c]) * T.Cast("float32",
                                  r[o - br * m3, c]), sq, esq, o - br * m3)
            T.copy(mul[0:rows * m3], Mul[r0 * m3:r0 * m3 + rows * m3])
            T.copy(sq[0:rows], Sq[r0:r0 + rows])

    return mhc_projection


def projection(x, fn):
    """``(mul (..., m3), sqrsum (..., 1))`` of the flattened residual ``x (..., m, H)`` onto ``fn (m3, m * H)``."""
    import torch

    from .._lib import LIB

    m3, k = fn.shape
    outer = x.shape[:-2]
    mul = torch.zeros(*outer, m3, dtype=torch.float32, device=x.device)
    sqrsum = torch.zeros(*outer, 1, dtype=torch.float32, device=x.device)
    t = mul.numel() // m3
    if t and k:  # K = 0: empty sums stay 0
        LIB.run_tilelang(build, (m3,), x.contiguous().view(t, k), fn.contiguous(), mul.view(-1), sqrsum.view(-1))
    return mul, sqrsum


MAX_MIXES = MAX_STREAMS * (MAX_STREAMS + 2)  # fn's rows staged in UB


def accepts(x, fn) -> bool:
    return 1 <= fn.shape[0] <= MAX_MIXES
