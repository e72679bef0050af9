"""Row scatter on Ascend (TileLang Ascend dialect, vector cores): packing tokens by destination rank
and unpacking received tokens into the expanded per-expert layout.

``Out[pos[i, j]] = In[i]`` for every ``pos[i, j] >= 0`` (rows travel as 32-bit words, or bytes where a
row is not whole words, so any element type),
then ``Out[begin:begin + count] = 0`` for each ``(begin, count)`` of ``Zero`` (the ``expert_alignment``
padding of an expanded receive). Rows no position names are left as they are; positions and zeroed
rows outside ``[0, out_rows)`` are skipped. A core stages a tile
of input rows in UB and writes each one to its positions with one GM DMA each; the zero ranges are
dealt to the cores round robin.

The row counts (``n``, ``out_rows``) and the zero-range count are symbolic (``T.dynamic``): one kernel
per row size and position count serves every batch, its grid sized at launch (deepjit.tilelang_route.dims).

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools
import math

from deepjit.tilelang_route.ub import padded

ROW_TILE_BYTES = 64 * 1024


@functools.cache
def build(row_bytes: int, p: int):
    """Scatter of ``n`` rows of ``row_bytes`` bytes through ``p`` positions each into ``out_rows`` rows,
    then the ``num_zero`` zero ranges (all three symbolic; only rows of whole words have them)."""
    import tilelang.ascend.language as T

    words = row_bytes % 4 == 0
    dtype, width = ("int32", row_bytes // 4) if words else ("uint8", row_bytes)
    rb = padded(width, 4 if words else 1)
    br = max(1, min(64, ROW_TILE_BYTES // (rb * (4 if words else 1))))
    n, out_rows, nz = T.dynamic("n"), T.dynamic("out_rows"), T.dynamic("num_zero")
    blocks = T.ceildiv(n, br)

    @T.prim_func
    def scatter_rows(In: T.Tensor((n, width), dtype), Pos: T.Tensor((n, p), "int32"),
                     Zero: T.Tensor((nz, 2), "int32"), Out: T.Tensor((out_rows, width), dtype)):
        with T.Kernel(blocks) as bid:
            x = T.alloc_shared((br, rb), dtype)
            pos = T.alloc_shared((br, padded(p, 4)), "int32")
            r0 = bid * br
            rows = T.min(br, n - r0)
            T.copy(In[r0:r0 + rows, :], x[0:rows, 0:width])
            T.copy(Pos[r0:r0 + rows, :], pos[0:rows, 0:p])
            for r in T.serial(rows):
                for j in T.serial(p):
                    dst = pos[r, j]
                    if dst >= 0:
                        if dst < out_rows:  # positions come from peers' metadata: never write outside Out
                            T.copy(x[r, 0:width], Out[dst, 0:width])
            if words:
                zero = T.alloc_shared((1, rb), dtype)
                span = T.alloc_shared((1, padded(2, 4)), "int32")
                T.clear(zero)
                for k in T.serial(T.ceildiv(nz - bid, blocks)):  # ranges bid, bid + blocks, ...
                    T.copy(Zero[bid + k * blocks, :], span[0, 0:2])
                    for i in T.serial(span[0, 1]):
                        row = span[0, 0] + i
                        if row >= 0:
                            if row < out_rows:
                                T.copy(zero[0, 0:width], Out[row, 0:width])

    return scatter_rows


def scatter_rows(src, pos, out, zero_ranges=None) -> None:
    """``out[pos[i, j]] = src[i]`` (``pos`` int32 ``[n, p]``, -1 = none), and the ``[z, 2]`` int32
    ``(begin, count)`` ranges of ``out`` zeroed. ``src`` and ``out`` are contiguous with equal row sizes.
    The ranges must not hold a row that ``pos`` writes (the dispatch zeroes padding rows, which no
    received row targets): blocks scatter and zero at once, so such a row could end up written or zeroed."""
    import torch

    from .._lib import LIB

    n, width = src.shape[0], row_bytes(src)
    if not out.is_contiguous() or row_bytes(out) != width:
        raise ValueError(f"out must be contiguous with rows of {width} bytes like src, got {row_bytes(out)} bytes, "
                         f"contiguous={out.is_contiguous()}")
    num_zero = 0 if zero_ranges is None else zero_ranges.shape[0]
    if num_zero and width % 4:
        raise ValueError(f"zero ranges need rows of whole 32-bit words, got {width} bytes")
    if width == 0 or out.shape[0] == 0 or (n == 0 and num_zero == 0) or (pos.shape[1] == 0 and num_zero == 0):
        return
    if n == 0 or pos.shape[1] == 0:  # only zero ranges: a one-row source that goes nowhere
        src = torch.zeros(1, width, dtype=torch.uint8, device=out.device)
        pos = torch.full((1, 1), -1, dtype=torch.int32, device=out.device)
        n = 1
    zeros = zero_ranges if num_zero else torch.zeros(1, 2, dtype=torch.int32, device=out.device)  # one empty range
    LIB.run_tilelang(build, (width, pos.shape[1]), raw_rows(src, width), pos.contiguous(), zeros.contiguous(), raw_rows(out, width))


def raw_rows(t, width: int):
    """``t``'s rows as int32 words (or bytes), a view of its storage."""
    import torch
    raw = t.contiguous().view(torch.uint8).reshape(t.shape[0], width)
    return raw.view(torch.int32) if width % 4 == 0 else raw


def row_bytes(t) -> int:
    """Bytes of one row (dimension 0) of ``t``."""
    return math.prod(t.shape[1:]) * t.element_size()
