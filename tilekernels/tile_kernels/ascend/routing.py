"""MoE routing on Ascend (TileLang Ascend dialect, vector cores, SIMT): serves
``tile_kernels.moe.topk_gate``, ``tile_kernels.moe.normalize_weight`` and ``tile_kernels.moe.top2_sum_gate``
(every option; a row-strided ``unmapped_topk_idx`` goes through a dense copy).

A core owns a tile of whole token rows in UB; one SIMT thread per token.
- top-k: ``num_topk`` selection passes in the order (score descending, index ascending), the order of
  ``reference/topk.stable_topk``. Pass i takes the best candidate that comes strictly after pass
  i-1's pick in that order, so no mask of taken experts is kept and ties resolve to the smaller index.
- top2_sum_gate: scores (sigmoid / sqrt(softplus) / softmax), ranking = (logits for softmax, else scores)
  + bias; with group limits the ``num_topk_groups`` groups of best top-2 sum are kept (the same ordered
  passes over group scores) and the others rank as -inf; top-k over the ranking; weights = chosen scores
  / max(sum, 1e-20) * routed_scaling_factor; shared experts appended with weight 1; a
  ``fix_routing_mask`` token takes its ``unmapped_topk_idx`` experts instead of the top-k, and the
  selections are written back to ``unmapped_topk_idx``; with ``to_physical_map`` each logical expert
  becomes its replica ``(ep_rank + token * 23333) % logical_count``; experts outside this TP rank -> -1,
  the rest renumbered locally (``reference/topk.mask_by_ep_tp``); a ``mask``-ed out token gets -1 / 0
  (and -1 in ``unmapped_topk_idx``). Weights use the cores'
  exp/log, so they match the reference to rounding (upstream's test is allclose), indices exactly.
- normalize_weight: the reference's sequential FP32 sum starting at 1e-20, then one division per weight.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import dataclasses
import functools

from deepjit.tilelang_route.ub import padded

ROW_TILE_BYTES = 64 * 1024  # scores staged in UB per core
DUPLICATE_HASH = 23333  # reference/topk.DUPLICATE_HASH: spreads tokens over an expert's physical replicas
# UB tiles pad their rows to whole 32-byte blocks (block_cast.padded) so every DMA burst starts aligned.


@dataclasses.dataclass(frozen=True)
class Top2Options:
    """The optional inputs of top2_sum_gate a kernel is built for: ``mask`` (inactive tokens get -1 / 0),
    ``fix`` (fix_routing_mask: those tokens keep unmapped_topk_idx's experts), ``unmapped`` (the selections
    written to unmapped_topk_idx), ``map_cols`` (to_physical_map's width, 0 = none) and the ``ep_rank`` that
    picks a replica."""
    mask: bool = False
    fix: bool = False
    unmapped: bool = False
    map_cols: int = 0
    ep_rank: int = 0


def _rows_per_core(t: int, row_bytes: int) -> int:
    return max(1, min(t, 64, ROW_TILE_BYTES // row_bytes))


def _ordered_passes(T):
    """The macro ``ordered_passes(src, r, base, n, count, dst)``: ``dst[r, p]`` = the index (from ``base``) of the
    p-th of ``src[r, base:base + n]`` in the order (value descending, index ascending), for p < count. NaN
    ranks above every number (torch's descending sort), NaNs among themselves by index: the comparisons
    test NaN explicitly (an ordered compare with NaN is false)."""

    def above(a, b):  # a ranks before b by value alone
        return T.Or(T.And(T.isnan(a), T.Not(T.isnan(b))), a > b)

    def tied(a, b):
        return T.Or(a == b, T.And(T.isnan(a), T.isnan(b)))

    @T.macro
    def ordered_passes(src, r, base, n, count, dst):
        prev_v = T.alloc_var("float32")
        prev_i = T.alloc_var("int32")
        best_v = T.alloc_var("float32")
        best_i = T.alloc_var("int32")
        prev_v = 0.0
        prev_i = -1
        for p in T.serial(count):
            best_i = -1
            best_v = -T.infinity("float32")
            for j in T.serial(n):
                v = src[r, base + j]
                after_prev = T.Or(prev_i < 0, T.Or(above(prev_v, v), T.And(tied(v, prev_v), j > prev_i)))
                if T.And(after_prev, T.Or(best_i < 0, above(v, best_v))):
                    best_v = v
                    best_i = j
            dst[r, p] = T.Cast(dst.dtype, best_i)
            prev_v = best_v
            prev_i = best_i

    return ordered_passes


@functools.cache
def build_topk_gate(t: int, e: int, k: int):
    import tilelang.ascend.language as T

    br = _rows_per_core(t, e * 4)
    ordered_passes = _ordered_passes(T)

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
                    ordered_passes(s, r, 0, e, k, idx)
            T.copy(idx[0:rows, 0:k], Idx[r0:r0 + rows, :])

    return topk_gate


@functools.cache
def build_top2_sum_gate(t: int, e: int, k: int, num_groups: int, num_topk_groups: int, num_shared: int,
                        scale: float, scoring: str, tp_rank: int, num_tp_ranks: int, experts_per_rank: int,
                        options: Top2Options = Top2Options()):
    import tilelang.ascend.language as T

    width = k + num_shared
    br = _rows_per_core(t, e * 12)
    grouped = num_groups != num_topk_groups
    ng = max(num_groups, 1)
    per_group = e // ng
    per_dp = experts_per_rank * num_tp_ranks
    mask_rows, fix_rows = (t if options.mask else 1), (t if options.fix else 1)
    un_shape = (t, k) if options.unmapped else (1, 1)
    map_shape = (e + num_shared, options.map_cols) if options.map_cols else (1, 1)
    map_rows = map_shape[0]
    has_mask, has_fix, has_un, map_cols, ep_rank = (options.mask, options.fix, options.unmapped, options.map_cols,
                                                    options.ep_rank)
    ordered_passes = _ordered_passes(T)

    @T.prim_func
    def top2_sum_gate(L: T.Tensor((t, e), "float32"), B: T.Tensor((e,), "float32"),
                      Mask: T.Tensor((mask_rows,), "uint8"), Fix: T.Tensor((fix_rows,), "uint8"),
                      Map: T.Tensor(map_shape, "int32"), Count: T.Tensor((map_rows,), "int32"),
                      Unmapped: T.Tensor(un_shape, "int64"),
                      Idx: T.Tensor((t, width), "int64"), Wt: T.Tensor((t, width), "float32")):
        with T.Kernel(T.ceildiv(t, br)) as bid:
            lg = T.alloc_shared((br, padded(e, 4)), "float32")
            bias = T.alloc_shared((padded(e, 4),), "float32")
            sc = T.alloc_shared((br, e), "float32")
            rk = T.alloc_shared((br, e), "float32")
            gs = T.alloc_shared((br, ng), "float32")
            top = T.alloc_shared((br, max(k, ng, 2)), "int32")
            idx = T.alloc_shared((br, padded(width, 8)), "int64")
            wt = T.alloc_shared((br, padded(width, 4)), "float32")
            act = T.alloc_shared((padded(br, 1),), "uint8")
            fix = T.alloc_shared((padded(br, 1),), "uint8")
            phys = T.alloc_shared((map_rows, padded(map_shape[1], 4)), "int32")
            cnt = T.alloc_shared((padded(map_rows, 4),), "int32")
            un = T.alloc_shared((br, padded(un_shape[1], 8)), "int64")
            r0 = bid * br
            rows = T.min(br, t - r0)
            T.copy(L[r0:r0 + rows, :], lg[0:rows, 0:e])
            T.copy(B, bias[0:e])
            if has_mask:
                T.copy(Mask[r0:r0 + rows], act[0:rows])
            if has_fix:
                T.copy(Fix[r0:r0 + rows], fix[0:rows])
                T.copy(Unmapped[r0:r0 + rows, :], un[0:rows, 0:k])
            if map_cols:
                T.copy(Map, phys[0:map_rows, 0:map_shape[1]])
                T.copy(Count, cnt[0:map_rows])
            with T.SimtVF(threads=br):
                for r in T.Parallel(br):
                    mx = T.alloc_var("float32")
                    tot = T.alloc_var("float32")
                    mx = -T.infinity("float32")
                    tot = 0.0
                    if scoring == "softmax":
                        for j in T.serial(e):
                            mx = T.max(mx, lg[r, j])
                        for j in T.serial(e):
                            tot = tot + T.exp(lg[r, j] - mx)
                    for j in T.serial(e):
                        if scoring == "sigmoid":
                            sc[r, j] = 1.0 / (1.0 + T.exp(-lg[r, j]))
                        elif scoring == "sqrtsoftplus":
                            sc[r, j] = T.sqrt(T.if_then_else(lg[r, j] > 20.0, lg[r, j], T.log1p(T.exp(lg[r, j]))))
                        else:
                            sc[r, j] = T.exp(lg[r, j] - mx) / tot
                        if scoring == "softmax":
                            rk[r, j] = lg[r, j] + bias[j]
                        else:
                            rk[r, j] = sc[r, j] + bias[j]
                    if grouped:
                        for g in T.serial(num_groups):
                            ordered_passes(rk, r, g * per_group, per_group, 2, top)
                            gs[r, g] = rk[r, g * per_group + top[r, 0]] + rk[r, g * per_group + top[r, 1]]
                        ordered_passes(gs, r, 0, num_groups, num_topk_groups, top)
                        for g in T.serial(num_groups):
                            kept = T.alloc_var("int32")
                            kept = 0
                            for p in T.serial(num_topk_groups):
                                if top[r, p] == g:
                                    kept = 1
                            if kept == 0:
                                for j in T.serial(per_group):
                                    rk[r, g * per_group + j] = -T.infinity("float32")
                    ordered_passes(rk, r, 0, e, k, top)
                    if has_fix:
                        if fix[r] != 0:
                            for p in T.serial(k):
                                # clamped into [0, E): ids are not checked on the host for device tensors
                                top[r, p] = T.Cast("int32", T.max(T.min(un[r, p], T.int64(e - 1)), T.int64(0)))
                    active = T.alloc_var("int32")
                    active = 1
                    if has_mask:
                        active = T.Cast("int32", act[r])
                    if has_un:
                        for p in T.serial(k):
                            un[r, p] = T.if_then_else(active != 0, T.Cast("int64", top[r, p]), T.int64(-1))
                    tot = 0.0
                    for p in T.serial(k):
                        tot = tot + sc[r, top[r, p]]
                    tot = T.if_then_else(T.isnan(tot), tot, T.max(tot, 1e-20))  # NaN kept, as torch's clamp
                    for p in T.serial(width):
                        ex = T.alloc_var("int32")
                        if p < k:
                            ex = top[r, p]
                            wt[r, p] = T.if_then_else(active != 0, sc[r, ex] / tot * scale, T.float32(0.0))
                        else:
                            ex = e + p - k
                            wt[r, p] = T.if_then_else(active != 0, T.float32(1.0), T.float32(0.0))
                        if map_cols:
                            # the token's replica of its expert: (ep_rank + token * DUPLICATE_HASH) % replicas
                            rep = T.floormod(T.Cast("int64", r0 + r) * DUPLICATE_HASH + ep_rank,
                                             T.Cast("int64", T.max(T.min(cnt[ex], map_cols), 1)))  # clamped
                            ex = phys[ex, T.Cast("int32", rep)]
                        loc = T.alloc_var("int32")
                        loc = ex - tp_rank * experts_per_rank
                        loc = loc - T.floordiv(loc, per_dp) * (per_dp - experts_per_rank)
                        ok = T.And(T.floormod(T.floordiv(ex, experts_per_rank), num_tp_ranks) == tp_rank, loc >= 0)
                        idx[r, p] = T.Cast("int64", T.if_then_else(T.And(ok, active != 0), loc, -1))
            T.copy(idx[0:rows, 0:width], Idx[r0:r0 + rows, :])
            T.copy(wt[0:rows, 0:width], Wt[r0:r0 + rows, :])
            if has_un:
                T.copy(un[0:rows, 0:k], Unmapped[r0:r0 + rows, :])

    return top2_sum_gate


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

    from .._lib import LIB

    t, e = scores.shape
    out = torch.empty((t, num_topk), dtype=torch.int64, device=scores.device)
    if t:
        LIB.run_tilelang(build_topk_gate, (t, e, num_topk), scores.contiguous(), out)
    return out


def normalize_weight(topk_weights):
    """``tile_kernels.moe.normalize_weight``: ``(denominator (T,), topk_weights / denominator)``."""
    import torch

    from .._lib import LIB

    t, k = topk_weights.shape
    den = torch.empty((t,), dtype=torch.float32, device=topk_weights.device)
    out = torch.empty((t, k), dtype=torch.float32, device=topk_weights.device)
    if t:
        LIB.run_tilelang(build_normalize_weight, (t, k), topk_weights.contiguous(), den, out)
    return den, out


def top2_sum_gate(logits, bias, num_topk: int, num_topk_groups: int, num_groups: int, use_shared_as_routed: bool,
                  num_shared_experts: int, routed_scaling_factor: float, ep_rank: int, num_ep_ranks: int, tp_rank: int,
                  num_tp_ranks: int, scoring_func: str, mask=None, fix_routing_mask=None, to_physical_map=None,
                  logical_count=None, unmapped_topk_idx=None):
    """``tile_kernels.moe.top2_sum_gate`` -> ``(topk_idx int64, topk_weights fp32)``, (T, num_topk + S);
    ``unmapped_topk_idx`` (rows of any stride) is written in place."""
    import torch

    from .._lib import LIB

    t, e = logits.shape
    dev = logits.device
    shared = num_shared_experts if use_shared_as_routed else 0
    idx = torch.empty((t, num_topk + shared), dtype=torch.int64, device=dev)
    wt = torch.empty((t, num_topk + shared), dtype=torch.float32, device=dev)
    if not t:
        return idx, wt
    fix = fix_routing_mask is not None and unmapped_topk_idx is not None
    map_cols = 0 if to_physical_map is None else to_physical_map.shape[1]
    options = Top2Options(mask is not None, fix, unmapped_topk_idx is not None, map_cols, ep_rank if map_cols else 0)
    experts_per_rank = (e + max(map_cols - 1, 0)) // num_ep_ranks
    args = (t, e, num_topk, num_groups, num_topk_groups, shared, float(routed_scaling_factor),
            scoring_func, tp_rank, num_tp_ranks, experts_per_rank, options)

    def given(x, dtype, shape):  # an absent input is a one-element placeholder the kernel never reads
        return x.contiguous().view(dtype) if x is not None else torch.zeros(shape, dtype=dtype, device=dev)

    strided = unmapped_topk_idx is not None and not unmapped_topk_idx.is_contiguous()
    unmapped = unmapped_topk_idx.contiguous() if strided else unmapped_topk_idx  # a strided one through a dense copy
    LIB.run_tilelang(build_top2_sum_gate, args, logits.contiguous(), bias.contiguous(), given(mask, torch.uint8, (1,)),
                   given(fix_routing_mask if fix else None, torch.uint8, (1,)),
                   given(to_physical_map, torch.int32, (1, 1)), given(logical_count, torch.int32, (1,)),
                   unmapped if unmapped is not None else torch.zeros((1, 1), dtype=torch.int64, device=dev), idx, wt)
    if strided:
        unmapped_topk_idx.copy_(unmapped)
    return idx, wt
