"""The dispatch / combine engine for NPU tensors (and CPU tensors under ``EP_BACKEND=ascend``, its
kernels then on the Ascend twin): the steps of ``engine.base.Engine``, the row work done by the
TileLang kernels, the data moved through the symmetric window where the ranks share one (the default:
transport_choice.py) and otherwise by the collective transport, whose steps are:

- ``plan`` computes the routing on the device (ascend/routing.py); ``exchange_counts`` is the one
  read back: every rank's count rows and ``topk_idx`` error words;
- ``send`` packs each token once per destination rank into a staging buffer of ``T * R`` rows
  (scatter kernel; the FP8-fused pack serves the cast), and the payload, the scales and the
  per-(token, destination) metadata go through ``all_to_all_single`` with exact splits;
- ``receive`` keeps token-major rows where they arrived and unpacks expanded ones into the
  per-expert layout, with the ``expert_alignment`` padding zeroed by the same kernel;
- combine sends one partial per (token, rank) (summed locally from the first slot, as upstream)
  or every (token, slot) row back, and the reduce kernel adds them at the source in upstream's order.

Through the window (``EP_ASCEND_TRANSPORT=auto`` where the ranks share one, or ``symm``) the counts and
rows move instead by kernel-initiated writes into the peers' windows (symm_steps.py: no host read without
``do_cpu_sync``, no ``all_to_all``); the unpack and reduce kernels and the row layouts are the same.
Rows wider than the exchange's UB row buffer take the collective steps whatever the choice.

Kernel shapes depend on the token count and the capacities, not on the routing, so repeated
steps reuse their kernels and a step of fixed size (the low-latency layout) can be captured.
"""
from __future__ import annotations

import torch

from ..engine.base import Engine, ReturnedRows, expert_starts
from ..engine.checks import CombineArgs, DispatchArgs
from ..engine.plan import RoutePlan
from . import routing, symm_exchange, symm_steps
from .reduce import combine_reduce
from .scatter import scatter_rows
from .transport import CollectiveExchange


class AscendEngine(Engine):
    """The steps on the device; staging buffers are sized per call (nothing lives in a fixed region)."""

    def __init__(self, group, device: torch.device, rank: int, num_ranks: int, region_bytes: int, timeout_s: float,
                 window: bool = False):
        super().__init__(rank, num_ranks, region_bytes)
        self.exchange = CollectiveExchange(group, device, timeout_s)
        self._got: dict | None = None
        self._back = None
        # window (transport_choice.py, collective): dispatch / combine (token-major and expanded) through the
        # symmetric window for rows that fit its UB row buffer (symm_steps.py)
        self.symm = symm_steps.SymmSteps(self, group, timeout_s) if window else None

    def _on_window(self, hidden: int) -> bool:
        """The window path: rows (up to 4-byte elements, so dispatch and combine decide alike) that fit the
        exchange's UB row buffer; wider rows keep the collective path."""
        return self.symm is not None and hidden * 4 <= symm_exchange.MAX_ROW_BYTES

    def counts_on_host(self, a: DispatchArgs) -> bool:
        return not self._on_window(a.hidden)

    def destroy(self) -> None:
        if self.symm is not None:
            self.symm.destroy()

    # ---- dispatch ----------------------------------------------------------------------------
    def plan(self, a: DispatchArgs) -> RoutePlan:
        plan, self._err = routing.plan(a.topk_idx, a.hidden, a.num_experts, self.num_ranks)
        return plan

    def exchange_counts(self, a: DispatchArgs, plan: RoutePlan) -> None:
        R = self.num_ranks
        counts = plan.send_counts
        C = counts.shape[1]
        err = self._err if a.handle is None else torch.zeros(routing.ERR_WORDS, dtype=torch.int32, device=counts.device)
        if self._on_window(a.hidden):
            self.symm.exchange_counts(a, plan, err)
            return
        words = torch.cat([counts.reshape(-1).to(self.exchange.device, torch.int32),
                           err.to(self.exchange.device, torch.int32)])
        rows = self.exchange.gather_words(words)
        for peer in range(R):
            msg = routing.error_message(rows[peer, R * C:].tolist(), a.num_experts)
            if msg is not None:
                raise ValueError(msg if peer == self.rank else f"deep_ep dispatch: rank {peer} rejected its "
                                                             f"arguments: {msg}")
        plan.all_counts = rows[:, :R * C].reshape(R, R, C)   # [source, destination, C]
        plan.send_counts = plan.all_counts[self.rank].contiguous()
        plan.recv_counts = plan.all_counts[:, self.rank].contiguous()
        tokens = plan.recv_counts[:, 0].long()
        plan.row_start = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(tokens, 0)]).int()
        plan.num_rows = int(plan.row_start[-1])

    def send(self, a: DispatchArgs, plan: RoutePlan) -> None:
        R, K, M = self.num_ranks, a.num_topk, a.num_max_tokens_per_rank
        T, dev, ex = a.num_tokens, a.x.device, self.exchange
        if self._on_window(a.hidden):
            self.symm.send(a, plan, _per_destination(a, plan))
            return
        send, recv = plan.send_tokens.tolist(), plan.recv_tokens.tolist()
        cap = T * R
        start = _exclusive_cumsum(plan.send_tokens).to(dev)
        pos = torch.where(plan.dst_slot >= 0, start[None, :] + plan.dst_slot, -1).int()  # [T, R]: send row
        got = {}
        # The payload: one row per (token, destination), packed by destination rank.
        xs = ex.staging("send_x", cap, (a.hidden,), a.x.dtype)
        scatter_rows(a.x.contiguous(), pos, xs)
        got["x"] = ex.staging("recv_x", R * M, (a.hidden,), a.x.dtype)
        ex.all_to_all(got["x"], xs, send, recv)
        if a.sf is not None:
            ss = ex.staging("send_sf", cap, tuple(a.sf.shape[1:]), a.sf.dtype)
            scatter_rows(a.sf.contiguous(), pos, ss)
            got["sf"] = ex.staging("recv_sf", R * M, tuple(a.sf.shape[1:]), a.sf.dtype)
            ex.all_to_all(got["sf"], ss, send, recv)
        ints, w = _per_destination(a, plan)
        target = torch.where(pos >= 0, pos, cap).reshape(-1).long()
        si = _scatter(ex.staging("send_ints", cap + 1, (2 + 2 * K,), torch.int64), target, ints)
        got["ints"] = ex.staging("recv_ints", R * M, (2 + 2 * K,), torch.int64)
        ex.all_to_all(got["ints"], si, send, recv)
        if w is not None:
            sw = _scatter(ex.staging("send_w", cap + 1, (K,), torch.float32), target, w)
            got["w"] = ex.staging("recv_w", R * M, (K,), torch.float32)
            ex.all_to_all(got["w"], sw, send, recv)
        self._got = got

    def receive(self, a: DispatchArgs, plan: RoutePlan, out) -> None:
        if self._on_window(a.hidden):
            self.symm.receive(a, plan, out)
            return
        R, K, M, n = self.num_ranks, a.num_topk, a.num_max_tokens_per_rank, plan.num_rows
        got, self._got = self._got, None
        dev = a.x.device
        src_rank = torch.repeat_interleave(torch.arange(R), plan.recv_tokens.long()).to(dev)
        ints = got["ints"][:n]
        local, within = ints[:, 2:2 + K], ints[:, 2 + K:]
        meta = out.recv_src_metadata
        meta[:n, 0] = (src_rank * M + ints[:, 0]).int()
        meta[:n, 1] = (src_rank * K + ints[:, 1]).int()
        sf = out.recv_sf
        if not a.do_expand:
            _rows(out.recv_x)[:n] = _rows(got["x"][:n])
            if sf is not None:
                sf[:n] = got["sf"][:n]
            out.recv_topk_idx[:n] = local
            if out.recv_topk_weights is not None:
                out.recv_topk_weights[:n] = got["w"][:n]
        else:
            self.unpack_expanded(a, plan, out, got, src_rank, local, within)
        if a.stats is not None:
            a.stats += out.true_per_expert.to(dev)

    def unpack_expanded(self, a: DispatchArgs, plan: RoutePlan, out, got: dict, src_rank, local, within) -> None:
        """The first ``len(src_rank)`` received rows (``got``: rows of both transports' receive staging, in
        arrival order) into the per-expert layout: row ``i``'s slot ``k`` goes to its local expert
        ``local[i, k]`` (-1: none) at index ``within[i, k]`` among that expert's rows from its source."""
        dev, n = a.x.device, src_rank.shape[0]
        has = local >= 0
        expert_base = plan.expert_base.long().to(dev)
        rows = torch.where(has, expert_base[src_rank[:, None], local.clamp(min=0)] + within, -1)
        meta, sf = out.recv_src_metadata, out.recv_sf
        meta[:n, 2:] = rows.int()
        slots = meta[:, 2:]                          # every output row's slots; -1 past the received rows
        zero = self._padding(a, plan)
        m = slots.shape[0]
        scatter_rows(got["x"][:m], slots, out.recv_x, zero)
        if sf is not None:
            target = sf if sf.is_contiguous() else torch.empty(sf.shape, dtype=sf.dtype, device=dev)
            scatter_rows(got["sf"][:m], slots, target, zero)
            if target is not sf:
                sf.copy_(target)
        if out.recv_topk_weights is not None:
            E = out.recv_topk_weights.shape[0]
            w = torch.zeros(E + 1, dtype=torch.float32, device=dev)
            w.index_copy_(0, torch.where(has, rows, E).reshape(-1), got["w"][:n].reshape(-1))
            out.recv_topk_weights.copy_(w[:E])

    def _padding(self, a: DispatchArgs, plan: RoutePlan) -> torch.Tensor:
        """``[E_local, 2]`` int32 ``(first padding row, count)`` per local expert (counts 0 without
        ``do_zero_padding``), so the unpack kernel has one shape either way."""
        true = plan.recv_counts[:, 1:].long().sum(0)
        al = a.expert_alignment
        aligned = (true + al - 1) // al * al
        begin = expert_starts(aligned, a.packed_stride) + true
        count = aligned - true if a.do_zero_padding else torch.zeros_like(true)
        return torch.stack([begin, count], 1).int().to(a.x.device)

    # ---- combine -----------------------------------------------------------------------------
    def combine_send(self, c: CombineArgs, multiple_reduction: bool) -> None:
        if self._on_window(c.handle._plan.hidden):
            self.symm.combine_send(c, multiple_reduction)
            return
        h, plan, ex = c.handle, c.handle._plan, self.exchange
        n, K = plan.num_rows, h.num_topk
        T = h._topk_idx.shape[0]
        meta = h.recv_src_metadata
        dev = c.x.device
        multi = not h.do_expand or multiple_reduction
        weights = None
        if not h.do_expand:
            rows = c.x[:n]
            if c.topk_weights is not None:
                weights = c.topk_weights[:n]
        elif multi:
            # One partial per received token: its local expanded rows summed in slot order, rounded once.
            slots = meta[:, 2:]
            rows = combine_reduce(c.x, slots, from_first=True)[:n]
            if c.topk_weights is not None:
                s = slots[:n].long()
                weights = torch.where(s >= 0, c.topk_weights[s.clamp(min=0)], 0.0)
        else:
            # Every (token, local slot) row travels, in (token, slot) order.
            slots = meta[:n, 2:].long()
            has = slots >= 0
            order = (torch.cumsum(has.reshape(-1).int(), 0) - 1).view(n, K)
            E = c.x.shape[0]
            inv = torch.full((E + 1,), -1, dtype=torch.int32, device=dev)
            inv.index_copy_(0, torch.where(has, slots, E).reshape(-1), torch.where(has, order, -1).int().reshape(-1))
            rows = ex.staging("combine_pairs", self.num_ranks * h.num_max_tokens_per_rank * K, (plan.hidden,),
                              torch.bfloat16)
            scatter_rows(c.x, inv[:E, None], rows)
        if multi:
            send, recv, cap = plan.recv_tokens.tolist(), plan.send_tokens.tolist(), T * self.num_ranks
        else:
            send, recv, cap = plan.recv_pairs.tolist(), plan.send_pairs.tolist(), T * K
        back = ex.staging("combine_rows", cap, (plan.hidden,), torch.bfloat16)
        ex.all_to_all(back, rows.contiguous(), send, recv)
        back_w = None
        if weights is not None:
            back_w = ex.staging("combine_w", cap, (K,), torch.float32)
            ex.all_to_all(back_w, weights.contiguous(), send, recv)
        self._back = (back, back_w, multi)

    def combine_reduce(self, c: CombineArgs, sum_weights: bool = False, slot_weights=None, out=None):
        """``(combined, weights)``; ``out`` (from ``combine_output``) receives the combined rows if given."""
        plan = c.handle._plan
        rows, weights, multi, valid, owner, start = ReturnedRows.take(self, c)
        T, K = valid.shape
        dev = valid.device
        dst_slot = plan.dst_slot.long()
        out_w = torch.zeros(T, K, dtype=torch.float32, device=dev) if c.topk_weights is not None else None
        bias = tuple(c.bias)
        if multi and sum_weights:
            # V1: one row per receiving rank, rows and weights summed in ascending rank order.
            pos = torch.where(dst_slot >= 0, start[None, :] + dst_slot, -1)
            if out_w is not None:
                for d in range(self.num_ranks):
                    out_w += torch.where((pos[:, d] >= 0)[:, None], weights[pos[:, d].clamp(min=0)], 0.0)
            return combine_reduce(rows, pos.int(), bias=bias, out=out), out_w
        if multi:
            # Each receiving rank's partial is added at the token's last top-k slot on that rank.
            later = torch.ones(K, K, dtype=torch.bool, device=dev).triu(1)
            same_later = (valid[:, None, :] & (owner[:, None, :] == owner[:, :, None]) & later).any(2)
            at = start[owner] + torch.gather(dst_slot, 1, owner)
            pos = torch.where(valid & ~same_later, at, -1)
            out = combine_reduce(rows, pos.int(), bias=bias, out=out)
        else:
            at = start[owner] + plan.exp_pos.long()
            pos = torch.where(valid, at, -1)
            out = combine_reduce(rows, pos.int(), slot_weights, bias=bias, out=out)
        if out_w is not None:  # V2: the value held by the rank owning slot k's expert
            cols = torch.arange(K, device=dev)[None, :].expand(T, K) if multi else torch.zeros_like(at)
            out_w = torch.where(valid, weights[at.clamp(min=0), cols], 0.0)
        return out, out_w


def _per_destination(a: DispatchArgs, plan: RoutePlan):
    """One row per (token, destination rank), ``[T * R, ...]``: source token, first local slot, then per
    slot the local expert and the index within it (int64 ``[2 + 2K]``); the weights held there (``[K]``)."""
    R, K, T, idx, dev = plan.num_ranks, a.num_topk, a.num_tokens, a.topk_idx, a.x.device
    e_local = plan.num_local_experts
    valid = idx >= 0
    here = valid[:, None, :] & (torch.where(valid, idx // e_local, R)[:, None, :]
                                == torch.arange(R, device=dev)[None, :, None])           # [T, R, K]
    first = torch.where(here.any(2), here.int().argmax(2), -1)
    ints = torch.cat([torch.arange(T, device=dev)[:, None, None].expand(T, R, 1), first[:, :, None],
                      torch.where(here, idx[:, None, :] % e_local, -1),
                      torch.where(here, plan.within[:, None, :].long(), -1)], 2).reshape(T * R, 2 + 2 * K)
    w = None
    if a.topk_weights is not None:
        w = torch.where(here, a.topk_weights[:, None, :], 0.0).reshape(T * R, K)
    return ints, w


def _exclusive_cumsum(counts: torch.Tensor) -> torch.Tensor:
    counts = counts.long()
    return torch.cumsum(counts, 0) - counts


def _scatter(buf: torch.Tensor, target: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``buf[target[i]] = values[i]``; ``buf``'s last row takes the entries that go nowhere."""
    buf.index_copy_(0, target, values.to(buf.dtype))
    return buf


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t
