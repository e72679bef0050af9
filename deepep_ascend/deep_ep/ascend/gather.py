"""Row gather on Ascend (TileLang Ascend dialect, vector cores): ``EngramBuffer.fetch``'s lookup of
global entry ids in the table all-gathered on the device.

``Out[i] = Table[ids[i]]`` for ``0 <= ids[i] < table_rows``; any other id gives a zero row (ids are
not read back on the host on the Ascend path, so the kernel keeps every read inside ``Table``). Rows
travel as 32-bit words: only rows of whole words, at most ``MAX_ROW_BYTES`` (``accepts``; TileLang 0.1.15
cannot clear a byte tile outside a VF). A core takes a tile of ids and moves each row GM -> UB -> GM.

The id count and the table's row count are symbolic (``T.dynamic``): one kernel per row size serves
every fetch, its grid sized at launch (deepjit.tilelang_route.dims).

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from deepjit.tilelang_route.ub import padded

from .scatter import raw_rows, row_bytes

IDS_PER_CORE_TILE = 64
MAX_ROW_BYTES = 64 * 1024   # two rows staged in UB per core


def accepts(peers, rows_per_peer: int, *_) -> bool:
    """The engram_gather table op's Ascend column: one table (all-gathered on the device) of whole-word rows
    that fit UB."""
    return len(peers) == 1 and rows_per_peer == peers[0].shape[0] and row_bytes(peers[0]) % 4 == 0 \
        and row_bytes(peers[0]) <= MAX_ROW_BYTES


@functools.cache
def build(row_bytes: int):
    """Gather of ``n`` rows of ``row_bytes`` bytes out of a ``table_rows``-row table (both symbolic)."""
    import tilelang.ascend.language as T

    if row_bytes % 4:
        raise ValueError(f"row_bytes: expected a multiple of 4, got {row_bytes}")
    width = row_bytes // 4
    dtype, rb, br = "int32", padded(width, 4), IDS_PER_CORE_TILE
    n, table_rows = T.dynamic("n"), T.dynamic("table_rows")
    blocks = T.ceildiv(n, br)

    @T.prim_func
    def gather_rows(Table: T.Tensor((table_rows, width), dtype), Ids: T.Tensor((n, 1), "int32"),
                    Out: T.Tensor((n, width), dtype)):
        with T.Kernel(blocks) as bid:
            x = T.alloc_shared((1, rb), dtype)
            zero = T.alloc_shared((1, rb), dtype)
            ids = T.alloc_shared((br, padded(1, 4)), "int32")
            T.clear(zero)
            r0 = bid * br
            rows = T.min(br, n - r0)
            T.copy(Ids[r0:r0 + rows, :], ids[0:rows, 0:1])
            for r in T.serial(rows):
                src = ids[r, 0]
                if src < 0:
                    T.copy(zero[0, 0:width], Out[r0 + r, 0:width])
                if src >= table_rows:
                    T.copy(zero[0, 0:width], Out[r0 + r, 0:width])
                if src >= 0:
                    if src < table_rows:
                        T.copy(Table[src, 0:width], x[0, 0:width])
                        T.copy(x[0, 0:width], Out[r0 + r, 0:width])

    return gather_rows


def gather(peers, rows_per_peer: int, ids, threads: int):
    """The engram_gather table op (``accepts``): rows ``ids`` of the one table in ``peers``."""
    return gather_rows(peers[0], ids)


def gather_rows(table, ids):
    """``table[ids]`` (``ids`` int32, any shape; out-of-range ids give zero rows) as a new tensor of
    ``ids.numel()`` rows shaped like ``table``'s, whose rows are whole 32-bit words."""
    import torch

    from .._lib import LIB

    flat = ids.reshape(-1, 1).contiguous()
    out = torch.empty((flat.shape[0], *table.shape[1:]), dtype=table.dtype, device=table.device)
    width = row_bytes(table)
    if out.numel() == 0 or width == 0:
        return out
    if table.shape[0] == 0:
        return out.zero_()
    LIB.run_tilelang(build, (width,), raw_rows(table, width), flat, raw_rows(out, width))
    return out
