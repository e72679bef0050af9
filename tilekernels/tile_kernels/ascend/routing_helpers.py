"""The MoE routing helpers on Ascend (TileLang Ascend dialect, vector cores, SIMT): serve
``tile_kernels.moe.group_count``, ``aux_fi``, ``mask_indices_by_tp``, ``inplace_unique_group_indices`` and
``topk_sum_and_topk_group_idx``.

Shapes are symbolic (``T.dynamic``) and the integer settings travel in a small ``Params`` tensor read into
UB, so one lowering per kernel (and index dtype) serves every shape and setting:
- group_count / aux_fi: one core counts the indices staged in UB in chunks (64 threads, a private row
  of counters each, summed per bin at the end); an index outside ``[0, bins)`` (-1 included) is not counted, so no
  index reaches past the histogram whatever the caller passed. aux_fi then scales each count as the
  reference does in FP32: ``count * num_experts / (num_tokens * num_aux_topk)``, two rounded steps.
- mask_indices_by_tp: elementwise ``reference/topk.mask_by_ep_tp`` in the indices' own integer type
  (torch's wrapping arithmetic), floor division as torch's ``//``.
- inplace_unique_group_indices: a thread per row; a non-negative entry equal to an earlier one becomes -1.
- topk_sum_and_topk_group_idx: a thread per token; each group's score is the sum of its ``num_topk_sum``
  best scores (picked in the order of routing's ``ordered_passes``: NaN first, as torch's topk), then
  the ``num_topk_groups`` best groups in that same order (ties -> smaller group).

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from deepjit.tilelang_route.ub import padded

from .routing import ROW_TILE_BYTES, _ordered_passes

CHUNK = 2048          # indices staged in UB per step of the counting kernel (16 KiB of int64)
LANES, WINDOW = 64, 256  # the counting kernel's threads, each with WINDOW counters (64 KiB of int32 in all)
ROWS = 64             # token rows a core owns in the row kernels (one SIMT thread each)
ELEMS = 2048          # indices a core owns in mask_indices_by_tp
NUM_PARAMS = 8        # the Params tensor: one 32-byte block of int32


@functools.lru_cache(maxsize=256)
def _constants(device: str, dtype: str, values: tuple):
    """A read-only device tensor of the settings ``values`` (padded to one 32-byte block): copied once per
    device and values, so calls after the first (a graph capture after warm-up) copy nothing to the device."""
    import torch

    t = torch.zeros(32 // getattr(torch, dtype).itemsize, dtype=getattr(torch, dtype))
    t[:len(values)] = torch.tensor(values, dtype=t.dtype)
    return t.to(device)


def _params(device, *values):
    return _constants(str(device), "int32", tuple(values))


@functools.cache
def build_count():
    """Histogram of ``Idx (n,)`` into ``Count (bins,)`` (int32) and ``Freq (bins,)`` = the aux_fi scaling
    (FP32 ``count * Scale[0] / Scale[1]``); ``Params[0]`` = bins.

    One core; ``LANES`` SIMT threads each count every LANES-th staged index into a private row of counters
    (no two threads add to one counter), then a thread per bin sums the rows. Bins go in windows of
    ``WINDOW`` (each window re-reads the indices: one window at DeepSeek's 256 experts). Every thread runs
    the same steps (an index outside the window adds 0 to counter 0): TileLang syncs the threads inside
    these loops, so no branch may skip them."""
    import tilelang.ascend.language as T

    n, bins = T.dynamic("n"), T.dynamic("bins")

    @T.prim_func
    def count(Idx: T.Tensor((n,), "int64"), Params: T.Tensor((NUM_PARAMS,), "int32"),
              Scale: T.Tensor((8,), "float32"), Count: T.Tensor((bins,), "int32"),
              Freq: T.Tensor((bins,), "float32")):
        with T.Kernel(1) as _:
            idx = T.alloc_shared((CHUNK,), "int64")
            par = T.alloc_shared((NUM_PARAMS,), "int32")
            sc = T.alloc_shared((8,), "float32")
            hist = T.alloc_shared((LANES, WINDOW), "int32")
            cnt = T.alloc_shared((WINDOW,), "int32")
            frq = T.alloc_shared((WINDOW,), "float32")
            T.copy(Params, par)
            T.copy(Scale, sc)
            for w in T.serial(T.ceildiv(bins, WINDOW)):
                b0 = w * WINDOW
                nb = T.min(WINDOW, bins - b0)
                with T.SimtVF(threads=LANES):
                    for lane in T.Parallel(LANES):
                        for j in T.serial(WINDOW):
                            hist[lane, j] = 0
                for step in T.serial(T.ceildiv(n, CHUNK)):
                    s0 = step * CHUNK
                    m = T.min(CHUNK, n - s0)
                    T.copy(Idx[s0:s0 + m], idx[0:m])
                    with T.SimtVF(threads=LANES):
                        for lane in T.Parallel(LANES):
                            for j in T.serial(CHUNK // LANES):
                                i = j * LANES + lane
                                v = idx[i] - T.Cast("int64", b0)
                                ok = T.And(i < m, T.And(v >= 0, v < T.Cast("int64", nb)))
                                slot = T.Cast("int32", T.if_then_else(ok, v, T.int64(0)))
                                hist[lane, slot] = hist[lane, slot] + T.if_then_else(ok, 1, 0)
                with T.SimtVF(threads=WINDOW):
                    for b in T.Parallel(WINDOW):
                        total = T.alloc_var("int32")
                        total = 0
                        for lane in T.serial(LANES):
                            total = total + hist[lane, b]
                        cnt[b] = total
                        frq[b] = T.Cast("float32", total) * sc[0] / sc[1]
                T.copy(cnt[0:nb], Count[b0:b0 + nb])
                T.copy(frq[0:nb], Freq[b0:b0 + nb])

    return count


@functools.cache
def build_mask_tp(dtype: str):
    """``Out = mask_by_ep_tp(Idx)`` elementwise; ``Params`` = (experts_per_rank, tp_rank, num_tp_ranks)."""
    import tilelang.ascend.language as T

    n = T.dynamic("n")

    @T.prim_func
    def mask_indices_by_tp(Idx: T.Tensor((n,), dtype), Params: T.Tensor((NUM_PARAMS,), "int32"),
                           Out: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, ELEMS)) as bid:
            x = T.alloc_shared((ELEMS,), dtype)
            y = T.alloc_shared((ELEMS,), dtype)
            par = T.alloc_shared((NUM_PARAMS,), "int32")
            e0 = bid * ELEMS
            m = T.min(ELEMS, n - e0)
            T.copy(Params, par)
            T.copy(Idx[e0:e0 + m], x[0:m])
            with T.SimtVF(threads=256):
                for i in T.Parallel(ELEMS):
                    per_rank = T.Cast(dtype, par[0])
                    tp_rank = T.Cast(dtype, par[1])
                    tp_ranks = T.Cast(dtype, par[2])
                    per_dp = per_rank * tp_ranks
                    v = x[i]
                    loc = v - tp_rank * per_rank
                    loc = loc - T.floordiv(loc, per_dp) * (per_dp - per_rank)
                    ok = T.And(T.And(v >= 0, T.floormod(T.floordiv(v, per_rank), tp_ranks) == tp_rank), loc >= 0)
                    y[i] = T.if_then_else(ok, loc, T.Cast(dtype, -1))
            T.copy(y[0:m], Out[e0:e0 + m])

    return mask_indices_by_tp


@functools.cache
def build_unique(k: int):
    """``G (t, k)`` in place: an entry >= 0 equal to an earlier one of its row becomes -1."""
    import tilelang.ascend.language as T

    t = T.dynamic("t")
    kp = padded(k, 8)  # whole 32-byte UB rows of int64

    @T.prim_func
    def unique_group_indices(G: T.Tensor((t, k), "int64")):
        with T.Kernel(T.ceildiv(t, ROWS)) as bid:
            g = T.alloc_shared((ROWS, kp), "int64")
            out = T.alloc_shared((ROWS, kp), "int64")
            r0 = bid * ROWS
            rows = T.min(ROWS, t - r0)
            T.copy(G[r0:r0 + rows, :], g[0:rows, 0:k])
            with T.SimtVF(threads=ROWS):
                for r in T.Parallel(ROWS):
                    for i in T.serial(k):
                        seen = T.alloc_var("int32")
                        seen = 0
                        for j in T.serial(i):
                            if g[r, j] == g[r, i]:
                                seen = 1
                        out[r, i] = T.if_then_else(T.And(seen != 0, g[r, i] >= 0), T.int64(-1), g[r, i])
            T.copy(out[0:rows, 0:k], G[r0:r0 + rows, :])

    return unique_group_indices


def topk_group_rows(e: int) -> int:
    """Token rows a core stages for ``e`` scores a row (0: a row does not fit ``ROW_TILE_BYTES``)."""
    return min(ROWS, ROW_TILE_BYTES // (padded(e, 4) * 4))


@functools.cache
def build_topk_group(g: int, eg: int, num_topk_sum: int, num_topk_groups: int):
    """``Idx (t, num_topk_groups)`` int64: the best groups of ``S (t, g * eg)`` (the scores' groups side by
    side) by their top-``num_topk_sum`` sum."""
    import tilelang.ascend.language as T

    t = T.dynamic("t")
    ordered_passes = _ordered_passes(T)
    e = g * eg
    rows_per_core = topk_group_rows(e)

    @T.prim_func
    def topk_sum_and_topk_group_idx(S: T.Tensor((t, e), "float32"), Idx: T.Tensor((t, num_topk_groups), "int64")):
        with T.Kernel(T.ceildiv(t, rows_per_core)) as bid:
            s = T.alloc_shared((rows_per_core, padded(e, 4)), "float32")
            gs = T.alloc_shared((rows_per_core, 32), "float32")
            top = T.alloc_shared((rows_per_core, 8), "int32")
            idx = T.alloc_shared((rows_per_core, padded(num_topk_groups, 8)), "int64")
            r0 = bid * rows_per_core
            rows = T.min(rows_per_core, t - r0)
            T.copy(S[r0:r0 + rows, :], s[0:rows, 0:e])
            with T.SimtVF(threads=rows_per_core):
                for r in T.Parallel(rows_per_core):
                    for gi in T.serial(g):
                        ordered_passes(s, r, gi * eg, eg, num_topk_sum, top)
                        if num_topk_sum == 1:
                            gs[r, gi] = s[r, gi * eg + top[r, 0]]
                        else:
                            gs[r, gi] = s[r, gi * eg + top[r, 0]] + s[r, gi * eg + top[r, 1]]
                    ordered_passes(gs, r, 0, g, num_topk_groups, idx)
            T.copy(idx[0:rows, 0:num_topk_groups], Idx[r0:r0 + rows, :])

    return topk_sum_and_topk_group_idx


def _histogram(idx, bins: int, scale: tuple[float, float]):
    import torch

    from .._lib import LIB

    dev = idx.device
    count = torch.empty(bins, dtype=torch.int32, device=dev)
    freq = torch.empty(bins, dtype=torch.float32, device=dev)
    flat = idx.contiguous().view(-1)
    if not flat.numel():  # the kernel still writes the zero counts (an empty Idx is never read)
        flat = torch.full((1,), -1, dtype=torch.int64, device=dev)
    LIB.run_tilelang(build_count, (), flat, _params(dev, bins), _constants(str(dev), "float32", scale), count, freq)
    return count, freq


def group_count(group_idx, num_groups: int):
    """``tile_kernels.moe.group_count``: int32 ``(num_groups,)`` counts of each group id, -1 ignored."""
    return _histogram(group_idx, num_groups, (1.0, 1.0))[0]


def aux_fi(topk_idx, num_experts: int, num_aux_topk: int):
    """``tile_kernels.moe.aux_fi``: FP32 ``count[e] * num_experts / (num_tokens * num_aux_topk)``; zeros for
    no tokens, as the reference."""
    import torch

    t = topk_idx.shape[0]
    if not t:
        return torch.zeros(num_experts, dtype=torch.float32, device=topk_idx.device)
    # the reference's Python-int operands, each rounded to FP32 as torch's scalar arithmetic does
    return _histogram(topk_idx, num_experts, (float(num_experts), float(t * num_aux_topk)))[1]


def mask_indices_by_tp(indices, n: int, num_ep_ranks: int, tp_rank: int, num_tp_ranks: int):
    """``tile_kernels.moe.mask_indices_by_tp``: indices of this TP rank renumbered locally, others -1
    (same shape and integer dtype as ``indices``)."""
    import torch

    from .._lib import LIB

    out = torch.empty(indices.shape, dtype=indices.dtype, device=indices.device)
    if out.numel():
        dtype = str(indices.dtype).removeprefix("torch.")
        LIB.run_tilelang(build_mask_tp, (dtype,), indices.contiguous().view(-1),
                       _params(indices.device, n // num_ep_ranks, tp_rank, num_tp_ranks), out.view(-1))
    return out


def mask_accepts(indices, n, num_ep_ranks, tp_rank, num_tp_ranks) -> bool:
    """int32 / int64 indices whose settings fit the kernel's int32 parameters."""
    import torch

    per_rank = n // num_ep_ranks
    return (indices.dtype in (torch.int32, torch.int64) and per_rank * num_tp_ranks < 2 ** 31
            and num_tp_ranks < 2 ** 31)


def inplace_unique_group_indices(group_indices, num_groups: int) -> None:
    """``tile_kernels.moe.inplace_unique_group_indices``: in place, repeats after a row's first -> -1."""
    from .._lib import LIB

    if group_indices.numel():
        LIB.run_tilelang(build_unique, (group_indices.shape[1],), group_indices)


def topk_sum_and_topk_group_idx(scores, num_topk_sum: int, num_topk_groups: int):
    """``tile_kernels.moe.topk_sum_and_topk_group_idx``: int64 ``(T, num_topk_groups)`` group indices."""
    import torch

    from .._lib import LIB

    t, g, eg = scores.shape
    out = torch.empty((t, num_topk_groups), dtype=torch.int64, device=scores.device)
    if t:
        LIB.run_tilelang(build_topk_group, (g, eg, num_topk_sum, num_topk_groups), scores.contiguous().view(t, g * eg),
                       out)
    return out


def topk_group_accepts(scores, num_topk_sum, num_topk_groups) -> bool:
    """A token's scores fit a core's UB tile."""
    return topk_group_rows(scores.shape[1] * scores.shape[2]) > 0
