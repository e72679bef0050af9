"""Row scatter on Ascend (TileLang Ascend dialect, vector cores): packing tokens by destination rank
and unpacking received tokens into the expanded per-expert layout.

``Out[pos[i, j]] = In[i]`` for every ``pos[i, j] >= 0`` (rows travel as bytes, so any element type),
then ``Out[begin:begin + count] = 0`` for each ``(begin, count)`` of ``Zero`` (the ``expert_alignment``
padding of an expanded receive). Rows no position names are left as they are. A core stages a tile
of input rows in UB and writes each one to its positions with one GM DMA each; the zero ranges are
dealt to the cores round robin.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

ROW_TILE_BYTES = 64 * 1024


def padded(n: int, elem_bytes: int) -> int:
    """``n`` elements rounded up to whole 32-byte UB blocks (UB DMA bursts start 32-byte aligned)."""
    per = 32 // elem_bytes
    return -(-n // per) * per


@functools.cache
def build(n: int, row_bytes: int, p: int, out_rows: int, num_zero: int):
    """Scatter of ``n`` rows of ``row_bytes`` bytes through ``p`` positions each into ``out_rows`` rows;
    ``num_zero`` zero ranges (0: none)."""
    import tilelang.ascend.language as T

    rb = padded(row_bytes, 1)
    br = max(1, min(n, 64, ROW_TILE_BYTES // rb))
    blocks = -(-n // br)
    nz = max(num_zero, 1)

    @T.prim_func
    def scatter_rows(In: T.Tensor((n, row_bytes), "uint8"), Pos: T.Tensor((n, p), "int32"),
                     Zero: T.Tensor((nz, 2), "int32"), Out: T.Tensor((out_rows, row_bytes), "uint8")):
        with T.Kernel(blocks) as bid:
            x = T.alloc_shared((br, rb), "uint8")
            pos = T.alloc_shared((br, padded(p, 4)), "int32")
            r0 = bid * br
            rows = T.min(br, n - r0)
            T.copy(In[r0:r0 + rows, :], x[0:rows, 0:row_bytes])
            T.copy(Pos[r0:r0 + rows, :], pos[0:rows, 0:p])
            for r in T.serial(rows):
                for j in T.serial(p):
                    dst = pos[r, j]
                    if dst >= 0:
                        T.copy(x[r, 0:row_bytes], Out[dst, 0:row_bytes])
            if num_zero > 0:
                zero = T.alloc_shared((1, rb), "uint8")
                ranges = T.alloc_shared((nz, padded(2, 4)), "int32")
                with T.SimtVF(threads=min(rb, 256)):
                    for c in T.Parallel(rb):
                        zero[0, c] = T.uint8(0)
                T.copy(Zero[0:nz, :], ranges[0:nz, 0:2])
                for z in T.serial(nz):
                    if z % blocks == bid:
                        for i in T.serial(ranges[z, 1]):
                            T.copy(zero[0, 0:row_bytes], Out[ranges[z, 0] + i, 0:row_bytes])

    return scatter_rows


def scatter_rows(src, pos, out, zero_ranges=None) -> None:
    """``out[pos[i, j]] = src[i]`` (``pos`` int32 ``[n, p]``, -1 = none), then the ``[z, 2]`` int32
    ``(begin, count)`` ranges of ``out`` zeroed. ``src`` and ``out`` are contiguous with equal row sizes."""
    import torch

    from .launch import launch, row_bytes

    n, width = src.shape[0], row_bytes(src)
    num_zero = 0 if zero_ranges is None else zero_ranges.shape[0]
    if width == 0 or out.shape[0] == 0 or (n == 0 and num_zero == 0) or (pos.shape[1] == 0 and num_zero == 0):
        return
    if n == 0 or pos.shape[1] == 0:  # only zero ranges: a one-row source that goes nowhere
        src = torch.zeros(1, width, dtype=torch.uint8, device=out.device)
        pos = torch.full((1, 1), -1, dtype=torch.int32, device=out.device)
        n = 1
    zeros = zero_ranges if num_zero else torch.zeros(1, 2, dtype=torch.int32, device=out.device)
    launch(build(n, width, pos.shape[1], out.shape[0], num_zero), _bytes(src, width), pos.contiguous(),
           zeros.contiguous(), _bytes(out, width))


def _bytes(t, width: int):
    import torch
    return t.view(torch.uint8).reshape(t.shape[0], width) if t.element_size() == 1 else \
        t.reshape(t.shape[0], -1).view(torch.uint8)
