"""The expert-major fused layout on Ascend (TileLang Ascend dialect, a vector core, SIMT): serves
``tile_kernels.moe.get_fused_mapping``.

One core, two passes over ``topk_idx`` staged in UB in chunks of ``CHUNK`` slots: the first counts the
slots of each expert; then each expert's segment is ``[start, end)`` with ``end - start`` its count
rounded up to ``alignment`` (running sums in expert order); the second pass gives every slot, in
(token, k) order, the next position of its expert's segment, so positions inside an expert ascend with
the slot (``reference/moe.get_fused_mapping``). Values are not checked on the host for device tensors
(graph capture): an id outside ``[0, E)`` is skipped like -1, and a slot whose position would fall past
the maps (``num_expanded_tokens`` too small) gets -1. ``token_topk_to_pos`` is written a chunk at a time; the
three ``pos_to_*`` maps one element per slot at its position (padding stays -1: the caller allocates
them filled).

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from deepjit.tilelang_route.ub import padded

CHUNK = 512  # slots staged per step: topk_idx (int64), their positions and the three map values
# a map value is DMAed to its position alone, from the start of its own 32-byte UB block (DMA alignment)
BLOCK = 8


@functools.cache
def build(t: int, k: int, e: int, rows: int, alignment: int):
    import tilelang.ascend.language as T

    n = t * k
    ch = min(CHUNK, n)
    steps = -(-n // ch)
    ep = padded(e, 4)

    @T.prim_func
    def get_fused_mapping(Idx: T.Tensor((n,), "int64"), P2E: T.Tensor((rows,), "int32"),
                          P2T: T.Tensor((rows,), "int32"), P2TT: T.Tensor((rows,), "int32"),
                          T2P: T.Tensor((n,), "int32"), Start: T.Tensor((e,), "int32"),
                          End: T.Tensor((e,), "int32"), PerExpert: T.Tensor((e,), "int32")):
        with T.Kernel(1) as _:
            idx = T.alloc_shared((padded(ch, 8),), "int64")
            pos = T.alloc_shared((padded(ch, 4),), "int32")
            vals = T.alloc_shared((ch, 3, BLOCK), "int32")
            count = T.alloc_shared((ep,), "int32")
            start = T.alloc_shared((ep,), "int32")
            end = T.alloc_shared((ep,), "int32")
            nxt = T.alloc_shared((ep,), "int32")
            with T.SimtVF(threads=1):
                for _i in T.Parallel(1):
                    for j in T.serial(e):
                        count[j] = 0
            for placing in (False, True):  # unrolled here: pass 1 counts each expert's slots, pass 2 places them
                if placing:  # the segments, between the passes
                    with T.SimtVF(threads=1):
                        for _i in T.Parallel(1):
                            acc = T.alloc_var("int32")
                            acc = 0
                            for j in T.serial(e):
                                start[j] = acc
                                nxt[j] = acc
                                acc = acc + T.floordiv(count[j] + (alignment - 1), alignment) * alignment
                                end[j] = acc
                                count[j] = acc - start[j]
                    T.copy(start[0:e], Start[0:e])
                    T.copy(end[0:e], End[0:e])
                    T.copy(count[0:e], PerExpert[0:e])
                for step in T.serial(steps):
                    s0 = step * ch
                    cnt = T.min(ch, n - s0)
                    T.copy(Idx[s0:s0 + cnt], idx[0:cnt])
                    with T.SimtVF(threads=1):
                        for _i in T.Parallel(1):
                            for j in T.serial(ch):
                                if j < cnt:
                                    ex = T.Cast("int32", idx[j])
                                    # an id outside [0, E) is skipped like -1 (compared before the int32 cast)
                                    known = T.And(idx[j] >= T.int64(0), idx[j] < T.int64(e))
                                    if not placing:
                                        if known:
                                            count[ex] = count[ex] + 1
                                    else:
                                        pos[j] = -1
                                        if known:
                                            if nxt[ex] < rows:  # never a position past the maps
                                                pos[j] = nxt[ex]
                                                nxt[ex] = nxt[ex] + 1
                                                vals[j, 0, 0] = ex
                                                vals[j, 1, 0] = T.floordiv(s0 + j, k)
                                                vals[j, 2, 0] = s0 + j
                    if placing:
                        T.copy(pos[0:cnt], T2P[s0:s0 + cnt])
                        for j in T.serial(cnt):
                            p = pos[j]
                            if p >= 0:
                                T.copy(vals[j, 0, 0:1], P2E[p:p + 1])
                                T.copy(vals[j, 1, 0:1], P2T[p:p + 1])
                                T.copy(vals[j, 2, 0:1], P2TT[p:p + 1])

    return get_fused_mapping


def get_fused_mapping(topk_idx, num_experts: int, num_expanded_tokens: int, alignment: int, force_no_sync: bool = False):
    """``tile_kernels.moe.get_fused_mapping``; with ``num_expanded_tokens == 0`` and no ``force_no_sync``
    the per-expert counts are read back (the list, and the maps cut to the used positions), as upstream."""
    import torch

    from .._lib import LIB

    t, k = topk_idx.shape
    dev = topk_idx.device
    sync = num_expanded_tokens == 0 and not force_no_sync
    rows = num_expanded_tokens or (t * k + (alignment - 1) * num_experts) // alignment * alignment
    p2e, p2t, p2tt = (torch.full((rows,), -1, dtype=torch.int32, device=dev) for _ in range(3))
    t2p = torch.full((t, k), -1, dtype=torch.int32, device=dev)
    start, end, per_expert = (torch.zeros(num_experts, dtype=torch.int32, device=dev) for _ in range(3))
    if t * k:
        LIB.run_tilelang(build, (t, k, num_experts, rows, alignment), topk_idx.contiguous().view(-1), p2e, p2t, p2tt,
                       t2p.view(-1), start, end, per_expert)
    counts_list = []
    if sync:
        counts_list = per_expert.tolist()
        total = sum(counts_list)
        p2e, p2t, p2tt = p2e[:total], p2t[:total], p2tt[:total]
    return p2e, p2t, p2tt, t2p, start, end, per_expert, counts_list
