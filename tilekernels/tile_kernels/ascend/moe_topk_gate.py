"""The DeepSeek-V4.1 router on Ascend (TileLang Ascend dialect, vector cores, SIMT): serves
``tile_kernels.moe.moe_topk_gate_forward`` (``reference/moe_topk_gate.py`` states the semantics).

A core owns a tile of whole token rows in UB, one SIMT thread per token:
- scores ``sqrt(softplus(x))`` in FP32 with the cores' exp/log1p/sqrt (the identity above 20, as torch);
  the reference rounds the FP64 value once, so a score may differ from it by an ulp: indices agree except
  where the ranking hinges on a gap of a few ulps (upstream's own test leaves those tokens out), weights and
  scores to upstream's allclose;
- ranking = scores + bias (``image_bias`` for image tokens), top-k by routing's ordered passes (value
  descending, NaN first, ties -> smaller expert), or a ``fix_routing_mask`` token's ``unmapped_topk_idx``;
  weights = score / (slot-by-slot sum + 1e-20) * scale; shared slots of weight 1; each slot's replica
  ``to_physical_map[e, (ep_rank + token * 23333) % logical_count[e]]``;
- a ``force_random`` token draws distinct physical ids and weights in (0, 1] from the reference's counter
  hash (``random_words``/``random_rows``: 32-bit xor-shift-multiply, bit-exact), over ``logical_count``'s
  sum, summed in the kernel (no host read);
- unrouted tokens (``mask`` False): ids -1, weights 0, ``unmapped_topk_idx`` -1, ``scores`` 0;
- values the public op checks on CPU tensors only (no host read of device tensors) are clamped: a fixed
  expert id into ``[0, E)``, a ``logical_count`` into ``[1, map columns]``, so no read leaves its UB tile.
The token count is symbolic; ``ep_rank`` and the scale travel in parameter tensors (no lowering per value).

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import dataclasses
import functools

from deepjit.tilelang_route.ub import padded

from .routing import DUPLICATE_HASH, _ordered_passes
from .routing_helpers import _constants

ROW_TILE_BYTES = 32 * 1024  # per UB buffer of token rows (two: scores and ranking)
MAX_EXPERTS = 4096          # a row of both buffers within 32 KiB
MAX_MAP_BYTES = 32 * 1024   # to_physical_map staged whole in UB
MIX1, MIX2 = 0x7FEB352D, 0x846CA68B  # reference/moe_topk_gate._mix32's multipliers


@dataclasses.dataclass(frozen=True)
class Options:
    """Which optional inputs a kernel is built for (absent ones are one-element placeholders never read)."""
    mask: bool = False
    bias: bool = False
    image: bool = False
    fix: bool = False
    force: bool = False
    unmapped: bool = False
    scores: bool = False
    map_cols: int = 0


def _rows(e: int) -> int:
    return max(1, min(64, ROW_TILE_BYTES // (padded(e, 4) * 4)))


@functools.cache
def build(e: int, k: int, s: int, options: Options):
    import tilelang.ascend.language as T

    t = T.dynamic("t")
    br = _rows(e)
    ep = padded(e, 4)
    width = k + s
    o = options
    mc = o.map_cols
    nl = e + s  # logical experts: routed and shared
    ordered_passes = _ordered_passes(T)

    def rows_of(flag):
        return t if flag else 1

    def mix32(x):
        x = x ^ (x >> T.uint32(16))
        x = x * T.uint32(MIX1)
        x = x ^ (x >> T.uint32(15))
        x = x * T.uint32(MIX2)
        return x ^ (x >> T.uint32(16))

    @T.prim_func
    def moe_topk_gate(L: T.Tensor((t, e), "float32"), Bias: T.Tensor((e if o.bias else 1,), "float32"),
                      IBias: T.Tensor((e if o.image else 1,), "float32"),
                      IMask: T.Tensor((rows_of(o.image),), "uint8"), Mask: T.Tensor((rows_of(o.mask),), "uint8"),
                      Fix: T.Tensor((rows_of(o.fix),), "uint8"), Force: T.Tensor((rows_of(o.force),), "uint8"),
                      Map: T.Tensor((nl if mc else 1, mc if mc else 1), "int32"),
                      Count: T.Tensor((nl if mc else 1,), "int32"),
                      Unmapped: T.Tensor((rows_of(o.unmapped), k if o.unmapped else 1), "int64"),
                      FParams: T.Tensor((8,), "float32"), IParams: T.Tensor((4,), "int64"),
                      Idx: T.Tensor((t, width), "int64"), Wt: T.Tensor((t, width), "float32"),
                      Scores: T.Tensor((rows_of(o.scores), e if o.scores else 1), "float32")):
        with T.Kernel(T.ceildiv(t, br)) as bid:
            sc = T.alloc_shared((br, ep), "float32")
            rk = T.alloc_shared((br, ep), "float32")
            bias = T.alloc_shared((ep,), "float32")
            ibias = T.alloc_shared((ep,), "float32")
            flags = T.alloc_shared((4, padded(br, 1)), "uint8")  # image, mask, fix, force
            phys = T.alloc_shared((nl if mc else 1, padded(max(mc, 1), 4)), "int32")
            cnt = T.alloc_shared((padded(nl, 4),), "int32")
            un = T.alloc_shared((br, padded(k, 8)), "int64")
            top = T.alloc_shared((br, 32), "int32")
            taken = T.alloc_shared((br, 32), "int32")
            idx = T.alloc_shared((br, padded(width, 8)), "int64")
            wt = T.alloc_shared((br, padded(width, 4)), "float32")
            fpar = T.alloc_shared((8,), "float32")
            ipar = T.alloc_shared((4,), "int64")
            r0 = bid * br
            rows = T.min(br, t - r0)
            T.copy(L[r0:r0 + rows, :], sc[0:rows, 0:e])
            T.copy(FParams, fpar)
            T.copy(IParams, ipar)
            if o.bias:
                T.copy(Bias, bias[0:e])
            if o.image:
                T.copy(IBias, ibias[0:e])
                T.copy(IMask[r0:r0 + rows], flags[0, 0:rows])
            if o.mask:
                T.copy(Mask[r0:r0 + rows], flags[1, 0:rows])
            if o.fix:
                T.copy(Fix[r0:r0 + rows], flags[2, 0:rows])
            if o.force:
                T.copy(Force[r0:r0 + rows], flags[3, 0:rows])
            if o.unmapped:
                T.copy(Unmapped[r0:r0 + rows, :], un[0:rows, 0:k])
            if mc:
                T.copy(Map, phys[0:nl, 0:mc])
                T.copy(Count, cnt[0:nl])
            with T.SimtVF(threads=br):
                for r in T.Parallel(br):
                    token = r0 + r
                    routed = T.alloc_var("int32")
                    forced = T.alloc_var("int32")
                    routed = 1
                    forced = 0
                    if o.mask:
                        routed = T.Cast("int32", flags[1, r] != 0)
                    if o.force:
                        forced = T.Cast("int32", T.And(flags[3, r] != 0, routed != 0))
                        routed = T.Cast("int32", T.And(routed != 0, forced == 0))
                    for j in T.serial(e):
                        x = sc[r, j]
                        sc[r, j] = T.sqrt(T.if_then_else(x > 20.0, x, T.log1p(T.exp(x))))
                        rb = T.alloc_var("float32")
                        rb = 0.0
                        if o.bias:
                            rb = bias[j]
                        if o.image:
                            if flags[0, r] != 0:
                                rb = ibias[j]
                        rk[r, j] = sc[r, j] + rb
                    ordered_passes(rk, r, 0, e, k, top)
                    if o.fix:
                        if flags[2, r] != 0:
                            for p in T.serial(k):
                                # clamped into [0, e): the public op checks them on CPU tensors only
                                top[r, p] = T.Cast("int32", T.max(T.min(un[r, p], T.int64(e - 1)), T.int64(0)))
                    if routed == 0:
                        for p in T.serial(k):
                            top[r, p] = 0  # the reference's never-indexing id of an unrouted row
                    tot = T.alloc_var("float32")
                    tot = sc[r, top[r, 0]]
                    for p in T.serial(k - 1):
                        tot = tot + sc[r, top[r, p + 1]]
                    for p in T.serial(width):
                        ex = T.alloc_var("int32")
                        if p < k:
                            ex = top[r, p]
                            wt[r, p] = T.if_then_else(routed != 0, sc[r, ex] / (tot + T.float32(1e-20)) * fpar[0],
                                                      T.float32(0.0))
                        else:
                            ex = e + p - k
                            wt[r, p] = T.if_then_else(routed != 0, T.float32(1.0), T.float32(0.0))
                        if mc:
                            rep = T.floormod(T.Cast("int64", token) * DUPLICATE_HASH + ipar[0],
                                             T.Cast("int64", T.max(T.min(cnt[ex], mc), 1)))  # a count within the map
                            ex = phys[ex, T.Cast("int32", rep)]
                        idx[r, p] = T.if_then_else(routed != 0, T.Cast("int64", ex), T.int64(-1))
                    if o.unmapped:
                        for p in T.serial(k):
                            un[r, p] = T.if_then_else(routed != 0, T.Cast("int64", top[r, p]), T.int64(-1))
                    if o.scores:
                        if routed == 0:
                            for j in T.serial(e):
                                sc[r, j] = 0.0
                    if o.force:
                        # every thread draws (TileLang syncs the threads inside these loops: no divergent
                        # branch around them); a forced token keeps its draws
                        physical = T.alloc_var("uint32")
                        physical = T.uint32(nl)
                        if mc:
                            physical = T.uint32(0)
                            for q in T.serial(nl):
                                physical = physical + T.Cast("uint32", T.max(T.min(cnt[q], mc), 1))
                        ep_word = T.Cast("uint32", T.bitwise_and(ipar[0], T.int64(0xFFFFFFFF)))
                        tok_word = T.Cast("uint32", token)
                        for p in T.serial(width):
                            word = mix32(mix32(mix32(T.Cast("uint32", p * 2)) ^ ep_word) ^ tok_word)
                            pick = T.alloc_var("int32")
                            pick = T.Cast("int32", word % (physical - T.Cast("uint32", p)))
                            for i in T.serial(p):  # step over the ids taken, smallest first
                                pick = pick + T.if_then_else(taken[r, i] <= pick, 1, 0)
                            # insert pick into the ascending taken[0:p]
                            pos = T.alloc_var("int32")
                            pos = p
                            for i in T.serial(p):
                                pos = T.if_then_else(T.And(pos == p, taken[r, i] > pick), i, pos)
                            for i in T.serial(p):
                                taken[r, p - i] = T.if_then_else(p - 1 - i >= pos, taken[r, p - 1 - i], taken[r, p - i])
                            taken[r, pos] = pick
                            wword = mix32(mix32(mix32(T.Cast("uint32", p * 2 + 1)) ^ ep_word) ^ tok_word)
                            idx[r, p] = T.if_then_else(forced != 0, T.Cast("int64", pick), idx[r, p])
                            wt[r, p] = T.if_then_else(
                                forced != 0, T.Cast("float32", (wword >> T.uint32(8)) + T.uint32(1)) * T.float32(2.0 ** -24),
                                wt[r, p])
            T.copy(idx[0:rows, 0:width], Idx[r0:r0 + rows, :])
            T.copy(wt[0:rows, 0:width], Wt[r0:r0 + rows, :])
            if o.unmapped:
                T.copy(un[0:rows, 0:k], Unmapped[r0:r0 + rows, :])
            if o.scores:
                T.copy(sc[0:rows, 0:e], Scores[r0:r0 + rows, :])

    return moe_topk_gate


def accepts(logits, num_topk, num_shared, scale, ep_rank, mask, bias, image_bias, image_token_mask,
            fix_routing_mask, to_physical_map, logical_count, unmapped_topk_idx, force_random, topk_idx,
            topk_weights, scores) -> bool:
    """At most MAX_EXPERTS experts (a row in UB), a to_physical_map within MAX_MAP_BYTES, ep_rank < 2**62."""
    e = logits.shape[1]
    # the map's UB tile: rows of whole 32-byte blocks
    map_bytes = 0 if to_physical_map is None else to_physical_map.shape[0] * -(-to_physical_map.shape[1] // 8) * 32
    return e <= MAX_EXPERTS and map_bytes <= MAX_MAP_BYTES and ep_rank < 2 ** 62


def moe_topk_gate_forward(logits, num_topk, num_shared, scale, ep_rank, mask, bias, image_bias, image_token_mask,
                          fix_routing_mask, to_physical_map, logical_count, unmapped_topk_idx, force_random, topk_idx,
                          topk_weights, scores) -> None:
    """Writes ``topk_idx``/``topk_weights`` and, when given, ``unmapped_topk_idx`` and ``scores`` (any of them
    strided: through a dense copy written back)."""
    import torch

    from .._lib import LIB

    t, e = logits.shape
    if not t:
        return
    dev = logits.device
    options = Options(mask is not None, bias is not None, image_bias is not None, fix_routing_mask is not None,
                      force_random is not None, unmapped_topk_idx is not None, scores is not None,
                      0 if to_physical_map is None else to_physical_map.shape[1])

    def flag(x):
        return torch.zeros(1, dtype=torch.uint8, device=dev) if x is None else x.contiguous().view(torch.uint8)

    def dense(x):
        return x if x is None or x.is_contiguous() else x.contiguous()

    def placeholder(x, dtype, shape):
        return torch.zeros(shape, dtype=dtype, device=dev) if x is None else x

    idx, wt, un, sc = dense(topk_idx), dense(topk_weights), dense(unmapped_topk_idx), dense(scores)
    fpar = _constants(str(dev), "float32", (float(scale),))
    ipar = _constants(str(dev), "int64", (ep_rank,))
    LIB.run_tilelang(build, (e, num_topk, num_shared, options), logits, placeholder(bias, torch.float32, (1,)),
                   placeholder(image_bias, torch.float32, (1,)), flag(image_token_mask), flag(mask),
                   flag(fix_routing_mask), flag(force_random), placeholder(to_physical_map, torch.int32, (1, 1)),
                   placeholder(logical_count, torch.int32, (1,)), placeholder(un, torch.int64, (1, 1)), fpar, ipar,
                   idx, wt, placeholder(sc, torch.float32, (1, 1)))
    for given, written in ((topk_idx, idx), (topk_weights, wt), (unmapped_topk_idx, un), (scores, sc)):
        if given is not written:
            given.copy_(written)
