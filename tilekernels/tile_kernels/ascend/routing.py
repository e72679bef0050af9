"""MoE routing on Ascend (TileLang Ascend dialect, vector cores, SIMT): serves
``tile_kernels.moe.topk_gate`` and ``tile_kernels.moe.normalize_weight``.

A core owns a tile of whole token rows in UB; one SIMT thread per token.
- top-k: ``num_topk`` selection passes in the order (score descending, index ascending), the order of
  ``reference/topk.stable_topk``. Pass i takes the best candidate that comes strictly after pass
  i-1's pick in that order, so no mask of taken experts is kept and ties resolve to the smaller index.
- normalize_weight: the reference's sequential FP32 sum starting at 1e-20, then one division per weight.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from .block_cast import padded

ROW_TILE_BYTES = 64 * 1024  # scores staged in UB per core
# UB tiles pad their rows to whole 32-byte blocks (block_cast.padded) so every DMA burst starts aligned.


def _rows_per_core(t: int, row_bytes: int) -> int:
    return max(1, min(t, 64, ROW_TILE_BYTES // row_bytes))


@functools.cache
def build_topk_gate(t: int, e: int, k: int):
    import tilelang.ascend.language as T

    br = _rows_per_core(t, e * 4)

    @T.prim_func
    def topk_gate(S: T.Tensor((t, e), "float32"), Idx: T.Tensor((t, k), "int64")):
        with T.Kernel(T.ceildiv(t, br)) as bid:
            s = T.alloc_shared((br, padded(e, 4)), "float32")
            idx = T.alloc_shared((br, padded(k, 8)), "int64")
            r0 = bid * br
            rows = T.min(br, t - r0)
            T.copy(S[r0:r0 + rows, :], s[0:rows, 0:e])
            with T.SimtVF(threads=br):
                for r in T.Parallel(br):
                    prev_v = T.alloc_var("float32")
                    prev_i = T.alloc_var("int32")
                    best_v = T.alloc_var("float32")
                    best_i = T.alloc_var("int32")
                    prev_v = T.infinity("float32")
                    prev_i = -1
                    for p in T.serial(k):
                        best_i = -1
                        best_v = -T.infinity("float32")
                        for j in T.serial(e):
                            v = s[r, j]
                            after_prev = T.Or(v < prev_v, T.And(v == prev_v, j > prev_i))
                            if T.And(after_prev, T.Or(best_i < 0, v > best_v)):
                                best_v = v
                                best_i = j
                        idx[r, p] = T.Cast("int64", best_i)
                        prev_v = best_v
                        prev_i = best_i
            T.copy(idx[0:rows, 0:k], Idx[r0:r0 + rows, :])

    return topk_gate


@functools.cache
def build_normalize_weight(t: int, k: int):
    import tilelang.ascend.language as T

    br = min(t, 512)

    @T.prim_func
    def normalize_weight(W: T.Tensor((t, k), "float32"), Den: T.Tensor((t,), "float32"),
                         Out: T.Tensor((t, k), "float32")):
        with T.Kernel(T.ceildiv(t, br)) as bid:
            w = T.alloc_shared((br, padded(k, 4)), "float32")
            den = T.alloc_shared((br,), "float32")
            out = T.alloc_shared((br, padded(k, 4)), "float32")
            r0 = bid * br
            rows = T.min(br, t - r0)
            T.copy(W[r0:r0 + rows, :], w[0:rows, 0:k])
            with T.SimtVF(threads=min(br, 256)):
                for r in T.Parallel(br):
                    acc = T.alloc_var("float32")
                    acc = 1e-20
                    for j in T.serial(k):
                        acc = acc + w[r, j]
                    den[r] = acc
                    for j in T.serial(k):
                        out[r, j] = w[r, j] / acc
            T.copy(den[0:rows], Den[r0:r0 + rows])
            T.copy(out[0:rows, 0:k], Out[r0:r0 + rows, :])

    return normalize_weight


def topk_gate(scores, num_topk: int):
    """``tile_kernels.moe.topk_gate``: int64 ``(T, num_topk)`` indices, descending, ties -> smaller index."""
    import torch

    from . import _launch

    t, e = scores.shape
    out = torch.empty((t, num_topk), dtype=torch.int64, device=scores.device)
    if t:
        _launch.launch(build_topk_gate(t, e, num_topk), scores.contiguous(), out)
    return out


def normalize_weight(topk_weights):
    """``tile_kernels.moe.normalize_weight``: ``(denominator (T,), topk_weights / denominator)``."""
    import torch

    from . import _launch

    t, k = topk_weights.shape
    den = torch.empty((t,), dtype=torch.float32, device=topk_weights.device)
    out = torch.empty((t, k), dtype=torch.float32, device=topk_weights.device)
    if t:
        _launch.launch(build_normalize_weight(t, k), topk_weights.contiguous(), den, out)
    return den, out
