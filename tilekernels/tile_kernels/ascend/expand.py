"""Expanding tokens into the fused per-expert layout on Ascend (TileLang Ascend dialect, vector cores):
serves ``tile_kernels.moe.expand_to_fused``.

``out[token_topk_to_pos[t, k]] = x[t]`` for every slot in ``[0, P)``; rows no slot maps to stay zero (the
output is allocated zeroed). Slots out of range are skipped (device values are not validated on the host:
graph capture). A core stages a tile of token rows (as bytes, so any element type) and
their slots in UB, then writes each row to every position it maps to with one GM DMA per slot.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from deepjit.tilelang_route.ub import padded

ROW_TILE_BYTES = 64 * 1024


@functools.cache
def build(t: int, row_bytes: int, k: int, num_rows: int, valid_rows: int):
    """``valid_rows`` (at most ``num_rows``): positions a slot may write; the rest of ``Out`` is padding."""
    import tilelang.ascend.language as T

    br = max(1, min(t, 64, ROW_TILE_BYTES // padded(row_bytes, 1)))

    @T.prim_func
    def expand_to_fused(X: T.Tensor((t, row_bytes), "uint8"), Pos: T.Tensor((t, k), "int32"),
                        Out: T.Tensor((num_rows, row_bytes), "uint8")):
        with T.Kernel(T.ceildiv(t, br)) as bid:
            x = T.alloc_shared((br, padded(row_bytes, 1)), "uint8")
            pos = T.alloc_shared((br, padded(k, 4)), "int32")
            r0 = bid * br
            rows = T.min(br, t - r0)
            T.copy(X[r0:r0 + rows, :], x[0:rows, 0:row_bytes])
            T.copy(Pos[r0:r0 + rows, :], pos[0:rows, 0:k])
            for r in T.serial(rows):
                for j in T.serial(k):
                    p = pos[r, j]
                    if T.And(p >= 0, p < valid_rows):
                        T.copy(x[r, 0:row_bytes], Out[p, 0:row_bytes])

    return expand_to_fused


def expand_to_fused(x, token_topk_to_pos, pos_to_expert, out_rows=None):
    """``tile_kernels.moe.expand_to_fused``: ``(len(pos_to_expert), *x.shape[1:])`` rows of x by slot
    (``out_rows`` rows, zero past ``len(pos_to_expert)``, where given)."""
    import torch

    from .._lib import LIB

    valid_rows = pos_to_expert.shape[0]
    num_rows = valid_rows if out_rows is None else out_rows
    out = torch.zeros((num_rows, *x.shape[1:]), dtype=x.dtype, device=x.device)
    t, k = token_topk_to_pos.shape
    row_bytes = x[0].numel() * x.element_size() if t else 0
    if t and k and num_rows and row_bytes:
        raw = x.contiguous().view(torch.uint8).reshape(t, row_bytes)
        LIB.run_tilelang(build, (t, row_bytes, k, num_rows, valid_rows), raw, token_topk_to_pos.contiguous(),
                       out.view(torch.uint8).reshape(num_rows, row_bytes))
    return out


def expand_to_fused_with_sf(x, num_per_channels, token_topk_to_pos, pos_to_expert, use_tma_aligned_col_major_sf=False):
    """``tile_kernels.moe.expand_to_fused_with_sf``: the data rows and the scale rows expanded by the same
    kernel (scales as byte rows). Column-major scales: the rows are expanded into ``align(P, 4)`` zeroed rows
    and transposed by the Ascend transpose into the storage ``(sf_cols, align(P, 4))``, padding zero as the
    reference's."""
    import torch

    from .transpose import batched_transpose

    data, sf = x
    num_rows = pos_to_expert.shape[0]
    out = expand_to_fused(data, token_topk_to_pos, pos_to_expert)
    if not use_tma_aligned_col_major_sf:
        return out, expand_to_fused(sf, token_topk_to_pos, pos_to_expert)
    ld = -(-num_rows // 4) * 4
    rows = expand_to_fused(sf, token_topk_to_pos, pos_to_expert, out_rows=ld)
    if sf.shape[1] == 0 or ld == 0:
        storage = torch.zeros((sf.shape[1], ld), dtype=sf.dtype, device=sf.device)
    else:
        storage = batched_transpose(rows.unsqueeze(0))[0]
    return out, storage[:, :num_rows].T
