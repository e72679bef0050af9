"""Transposes on Ascend (TileLang Ascend dialect, vector cores, SIMT): serves
``tile_kernels.transpose.batched_transpose`` (and ``transpose``, its one-batch form) for 1-, 2- and 4-byte
elements (FP8, BF16, FP32 and the integer types of those widths).

``out[b, c, r] = x[b, r, c]``. A core owns one ``(TILE, TILE)`` tile of one batch: it loads the tile into UB
by DMA (ragged edges as shorter bursts), swaps it into a second UB tile with one SIMT pass and writes that
to the transposed place. Elements move as integers of their width, so every bit (a NaN's payload, -0) is
kept. The batch and both dimensions are symbolic (``T.dynamic``): one lowering per element width serves
every shape.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

INT_OF_WIDTH = {1: "uint8", 2: "int16", 4: "int32"}
TILE = {1: 128, 2: 128, 4: 64}  # at most 32 KiB a tile (two in UB), whole 32-byte rows for every width


@functools.cache
def build(elem_bytes: int):
    import tilelang.ascend.language as T

    dtype, tile = INT_OF_WIDTH[elem_bytes], TILE[elem_bytes]
    b, m, n = T.dynamic("b"), T.dynamic("m"), T.dynamic("n")

    @T.prim_func
    def batched_transpose(X: T.Tensor((b, m, n), dtype), Out: T.Tensor((b, n, m), dtype)):
        with T.Kernel(b * T.ceildiv(m, tile) * T.ceildiv(n, tile)) as bid:
            x = T.alloc_shared((tile, tile), dtype)
            y = T.alloc_shared((tile, tile), dtype)
            tiles_n = T.ceildiv(n, tile)
            per_batch = T.ceildiv(m, tile) * tiles_n
            bb = bid // per_batch
            r0 = (bid % per_batch // tiles_n) * tile
            c0 = (bid % tiles_n) * tile
            rows = T.min(tile, m - r0)
            cols = T.min(tile, n - c0)
            T.copy(X[bb, r0:r0 + rows, c0:c0 + cols], x[0:rows, 0:cols])
            with T.SimtVF(threads=256):
                for c, r in T.Parallel(tile, tile):
                    y[c, r] = x[r, c]
            T.copy(y[0:cols, 0:rows], Out[bb, c0:c0 + cols, r0:r0 + rows])

    return batched_transpose


def batched_transpose(x):
    """Contiguous ``(B, N, M)`` from ``x (B, M, N)`` of 1-, 2- or 4-byte elements."""
    import torch

    from .._lib import LIB

    bsz, m, n = x.shape
    out = torch.empty((bsz, n, m), dtype=x.dtype, device=x.device)
    if out.numel():
        as_int = getattr(torch, INT_OF_WIDTH[x.element_size()])
        LIB.run_tilelang(build, (x.element_size(),), x.contiguous().view(as_int), out.view(as_int))
    return out


def accepts(x) -> bool:
    return x.element_size() in INT_OF_WIDTH
