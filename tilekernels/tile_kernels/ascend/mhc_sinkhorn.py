"""Sinkhorn normalisation of the mHC combination matrices on Ascend (TileLang Ascend dialect, vector cores,
SIMT): serves ``tile_kernels.modeling.mhc.ops.sinkhorn_normalize`` (table op ``sinkhorn_normalize``).

Per ``(m, m)`` matrix, as ``reference/mhc.sinkhorn_normalize_ref``: a softmax over each row (``exp(x - max)``
times the reciprocal of the row sum, torch's CPU softmax), ``+ eps``, a column normalisation
``x / (colsum + eps)``, then ``repeat - 1`` rounds of row then column normalisation. A core stages a tile
of whole matrices in UB; one SIMT thread per matrix (a tile's unused slots compute on stale UB and are never written out). The row max keeps a NaN (the device's float max drops
it), so a NaN or +Inf entry makes its matrix NaN as in torch. The matrix count is symbolic: one lowering per
``(m, repeat)``; eps travels as an FP32 tensor.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from .block_cast import nan_max
from .mhc_mix import scalars, serves_streams

TILE = 4096  # FP32 elements a core stages (whole matrices)


def normalise(T, m: int, repeat: int):
    """The macro ``normalise(x, o, eps)``: Sinkhorn of the ``(m, m)`` matrix at ``x[o:o + m * m]`` in place
    (one SIMT thread); shared with the fused pre-mix kernel (mhc_mix.build_pre_mixes) so both round alike."""

    @T.macro
    def normalise(x, o, eps):
        acc = T.alloc_var("float32")
        for r in T.serial(m):
            acc = -T.infinity("float32")
            for c in T.serial(m):
                acc = nan_max(T, acc, x[o + r * m + c])
            mx = acc
            acc = 0.0
            for c in T.serial(m):
                x[o + r * m + c] = T.exp(x[o + r * m + c] - mx)
                acc = acc + x[o + r * m + c]
            inv = 1.0 / acc
            for c in T.serial(m):
                x[o + r * m + c] = x[o + r * m + c] * inv + eps
        for it in T.serial(2 * repeat - 1):  # column, (row, column) * (repeat - 1)
            # unrolled: one pass divides each of the m lines (columns on even rounds, rows on odd ones) by
            # its sum + eps; a line starts ``line`` elements after the previous one, its elements ``step`` apart
            for parity, line, step in ((0, 1, m), (1, m, 1)):
                if it % 2 == parity:
                    for i in T.serial(m):
                        acc = 0.0
                        for j in T.serial(m):
                            acc = acc + x[o + i * line + j * step]
                        d = acc + eps
                        for j in T.serial(m):
                            x[o + i * line + j * step] = x[o + i * line + j * step] / d

    return normalise


@functools.cache
def build(m: int, repeat: int):
    import tilelang.ascend.language as T

    mm = m * m
    bt = max(1, min(256, TILE // mm))
    n = T.dynamic("n")  # matrices * m * m
    sinkhorn_of = normalise(T, m, repeat)

    @T.prim_func
    def mhc_sinkhorn(X: T.Tensor((n,), "float32"), P: T.Tensor((1,), "float32"), Out: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, bt * mm)) as bid:
            x = T.alloc_shared((bt * mm,), "float32")
            sp = T.alloc_shared((8,), "float32")
            b0 = bid * bt
            mats = T.min(bt, n // mm - b0)
            T.copy(X[b0 * mm:b0 * mm + mats * mm], x[0:mats * mm])
            T.copy(P, sp[0:1])
            with T.SimtVF(threads=bt):
                for b in T.Parallel(bt):
                    sinkhorn_of(x, b * mm, sp[0])
            T.copy(x[0:mats * mm], Out[b0 * mm:b0 * mm + mats * mm])

    return mhc_sinkhorn


def accepts(x, *_) -> bool:
    return serves_streams(x.shape[-1])


def sinkhorn(x, repeat, eps):
    """``(..., m, m)`` FP32 -> the same shape, each matrix normalised."""
    import torch

    from .._lib import LIB

    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    if out.numel():
        params = scalars(x.device, eps)
        LIB.run_tilelang(build, (x.shape[-1], repeat), x.contiguous().view(-1), params, out.view(-1))
    return out
