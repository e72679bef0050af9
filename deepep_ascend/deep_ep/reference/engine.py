"""The reference engine: dispatch and combine in plain PyTorch over ``torch.distributed``.

It defines the semantics the host kernels reproduce and serves every device without kernels
(NPU tensors with HCCL, or ``EP_BACKEND=reference``). Same steps and outputs as the host engine;
only the data movement differs: per-destination tensors in source-token order travel through
``all_to_all_single`` instead of byte slots through shared memory.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..engine.base import Engine, ReturnedRows
from ..engine.checks import CombineArgs, DispatchArgs, expert_id_error
from ..engine.plan import RoutePlan


def _a2a(t: torch.Tensor, send: list[int], recv: list[int], group) -> torch.Tensor:
    """all_to_all_single of whole rows (FP8 travels as bytes)."""
    flat = t.reshape(t.shape[0], -1)
    raw = flat.view(torch.uint8) if flat.element_size() == 1 else flat
    out = torch.empty(sum(recv), raw.shape[1], dtype=raw.dtype, device=t.device)
    dist.all_to_all_single(out, raw.contiguous(), recv, send, group=group)
    return out.view(t.dtype).view(sum(recv), *t.shape[1:])


class ReferenceEngine(Engine):
    """The steps in plain PyTorch; the outputs' sizes and contents are ``Engine.allocate``'s."""

    def __init__(self, group, rank: int, num_ranks: int, region_bytes: int):
        super().__init__(rank, num_ranks, region_bytes)
        self.group = group

    # ---- dispatch ----------------------------------------------------------------------------
    def plan(self, a: DispatchArgs) -> RoutePlan:
        idx, R = a.topk_idx, self.num_ranks
        T, K = idx.shape
        e_local = a.num_experts // R
        bad = (idx < -1) | (idx >= a.num_experts)
        if bool(bad.any()):
            t, k = (int(v) for v in bad.nonzero()[0])
            raise ValueError(expert_id_error(1, t, k, int(idx[t, k]), a.num_experts))
        same = (idx[:, :, None] == idx[:, None, :]) & (idx[:, :, None] >= 0)
        dup = same & torch.ones(K, K, dtype=torch.bool, device=idx.device).tril(-1)
        if bool(dup.any()):
            t, k, _ = (int(v) for v in dup.nonzero()[0])
            raise ValueError(expert_id_error(2, t, k, int(idx[t, k]), a.num_experts))
        valid = idx >= 0
        owner = torch.where(valid, idx // e_local, R)
        in_rank = torch.zeros(T, R + 1, dtype=torch.bool, device=idx.device).scatter_(1, owner, True)[:, :R]
        dst_slot = torch.where(in_rank, torch.cumsum(in_rank.int(), 0) - 1, -1).int()
        # Index of token t among this rank's tokens for the same expert, and of (t, k) among the
        # (token, slot) pairs bound for the same rank, both in (token, slot) order.
        expert_hot = torch.zeros(T, a.num_experts + 1, dtype=torch.int32, device=idx.device)
        expert_hot.scatter_(1, torch.where(valid, idx, a.num_experts), 1)
        within = torch.where(valid, torch.gather(torch.cumsum(expert_hot, 0) - 1, 1, torch.where(valid, idx, 0)), -1)
        pair_owner = owner.reshape(-1)
        pair_hot = torch.zeros(T * K, R + 1, dtype=torch.int32, device=idx.device).scatter_(1, pair_owner[:, None], 1)
        exp_pos = torch.gather(torch.cumsum(pair_hot, 0) - 1, 1, pair_owner[:, None]).view(T, K)
        exp_pos = torch.where(valid, exp_pos, -1)
        per_expert = expert_hot[:, : a.num_experts].sum(0).view(R, e_local)
        counts = torch.cat([in_rank.sum(0).int()[:, None], per_expert.int()], 1).cpu()
        return RoutePlan(a.hidden, R, e_local, dst_slot, within.int(), exp_pos.int(), counts)

    def exchange_counts(self, a: DispatchArgs, plan: RoutePlan) -> None:
        counts = plan.send_counts.to(a.x.device)
        rows = [torch.empty_like(counts) for _ in range(self.num_ranks)]
        dist.all_gather(rows, counts, group=self.group)
        plan.all_counts = torch.stack(rows).cpu()       # [source, destination, C], as the host engine has
        plan.recv_counts = recv = plan.all_counts[:, self.rank].contiguous()
        tokens = recv[:, 0].long()
        plan.row_start = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(tokens, 0)]).int()
        plan.num_rows = int(plan.row_start[-1])

    def send(self, a: DispatchArgs, plan: RoutePlan) -> None:
        R, idx = self.num_ranks, a.topk_idx
        order, dest = [], []
        for d in range(R):
            tokens = (plan.dst_slot[:, d] >= 0).nonzero().squeeze(1)
            order.append(tokens)
            dest.append(torch.full_like(tokens, d))
        order, dest = torch.cat(order), torch.cat(dest)
        here = (idx[order] >= 0) & (idx[order] // plan.num_local_experts == dest[:, None])
        send, recv = plan.send_tokens.tolist(), plan.recv_tokens.tolist()
        first = torch.where(here.any(1), here.int().argmax(1), -1)
        ints = torch.cat([order[:, None], first[:, None], torch.where(here, idx[order] % plan.num_local_experts, -1),
                          torch.where(here, plan.within[order].long(), -1)], 1)
        self._got = {"x": _a2a(a.x[order], send, recv, self.group), "ints": _a2a(ints, send, recv, self.group)}
        if a.sf is not None:
            self._got["sf"] = _a2a(a.sf[order], send, recv, self.group)
        if a.topk_weights is not None:
            self._got["w"] = _a2a(torch.where(here, a.topk_weights[order], 0.0), send, recv, self.group)

    def receive(self, a: DispatchArgs, plan: RoutePlan, out) -> None:
        K, M, n = a.num_topk, a.num_max_tokens_per_rank, plan.num_rows
        got, self._got = self._got, None
        dev = a.x.device
        src_rank = torch.repeat_interleave(torch.arange(self.num_ranks, device=dev), plan.recv_tokens.long().to(dev))
        ints = got["ints"]
        local, within = ints[:, 2:2 + K], ints[:, 2 + K:]
        meta = out.recv_src_metadata
        meta[:n, 0] = (src_rank * M + ints[:, 0]).int()
        meta[:n, 1] = (src_rank * K + ints[:, 1]).int()
        if not a.do_expand:
            _rows(out.recv_x)[:n] = _rows(got["x"])
            if out.recv_sf is not None:
                out.recv_sf[:n] = got["sf"]
            out.recv_topk_idx[:n] = local
            if out.recv_topk_weights is not None:
                out.recv_topk_weights[:n] = got["w"]
        else:
            has = local >= 0
            expert_base = plan.expert_base.long().to(dev)
            rows = torch.where(has, expert_base[src_rank[:, None], local.clamp(min=0)] + within, -1)
            meta[:n, 2:] = rows.int()
            token = has.nonzero()[:, 0]
            target = rows[has]
            _rows(out.recv_x)[target] = _rows(got["x"])[token]
            if out.recv_sf is not None:
                out.recv_sf[target] = got["sf"][token]
            if out.recv_topk_weights is not None:
                out.recv_topk_weights[target] = got["w"][has]
            if out.pad_rows is not None and out.pad_rows.numel():
                pad = out.pad_rows.to(dev)
                _rows(out.recv_x)[pad] = 0
                if out.recv_sf is not None:
                    out.recv_sf[pad] = 0
                if out.recv_topk_weights is not None:
                    out.recv_topk_weights[pad] = 0
        if a.stats is not None:
            a.stats += out.true_per_expert.to(dev)

    # ---- combine -----------------------------------------------------------------------------
    def combine_send(self, c: CombineArgs, multiple_reduction: bool) -> None:
        h, plan = c.handle, c.handle._plan
        n, K = plan.num_rows, h.num_topk
        meta = h.recv_src_metadata[:n]
        dev = c.x.device
        multi = not h.do_expand or multiple_reduction
        if not h.do_expand:
            rows, weights = c.x[:n], (c.topk_weights[:n] if c.topk_weights is not None else torch.zeros(n, K, dtype=torch.float32, device=dev))
            send_rows, recv_rows = plan.recv_tokens, plan.send_tokens
        elif multi:
            # One partial per received token: its local expanded rows summed in slot order, rounded once.
            slots = meta[:, 2:].long()
            acc = torch.zeros(n, plan.hidden, dtype=torch.float32, device=dev)
            started = torch.zeros(n, dtype=torch.bool, device=dev)
            weights = torch.zeros(n, K, dtype=torch.float32, device=dev)
            for k in range(K):
                has = slots[:, k] >= 0
                row = c.x[slots[:, k].clamp(min=0)].float()
                acc = torch.where((has & started)[:, None], acc + row, torch.where(has[:, None], row, acc))
                started |= has
                if c.topk_weights is not None:
                    weights[:, k] = torch.where(has, c.topk_weights[slots[:, k].clamp(min=0)], 0.0)
            rows = acc.bfloat16()
            send_rows, recv_rows = plan.recv_tokens, plan.send_tokens
        else:
            # Every (token, local slot) row travels, in (token, slot) order.
            slots = meta[:, 2:].long()
            has = slots >= 0
            rows = c.x[slots[has]]
            weights = torch.zeros(rows.shape[0], K, dtype=torch.float32, device=dev)
            send_rows, recv_rows = plan.recv_pairs, plan.send_pairs
        send, recv = send_rows.tolist(), recv_rows.tolist()
        self._back = (_a2a(rows, send, recv, self.group), _a2a(weights, send, recv, self.group), multi)

    def combine_reduce(self, c: CombineArgs, sum_weights: bool = False, slot_weights=None, out=None):
        combined, weights = self._reduce(c, sum_weights, slot_weights)
        return (combined, weights) if out is None else (out.copy_(combined), weights)

    def _reduce(self, c: CombineArgs, sum_weights: bool, slot_weights):
        plan = c.handle._plan
        rows, weights, multi, valid, owner, start = ReturnedRows.take(self, c)
        T, K = valid.shape
        dev = valid.device
        acc = torch.zeros(T, plan.hidden, dtype=torch.float32, device=dev)
        if c.bias:
            acc = c.bias[0].float() + (c.bias[1].float() if len(c.bias) > 1 else 0)
        out_w = torch.zeros(T, K, dtype=torch.float32, device=acc.device) if c.topk_weights is not None else None
        if multi and sum_weights:
            # V1: one row per receiving rank, rows and weights summed in ascending rank order.
            for d in range(self.num_ranks):
                slot = plan.dst_slot[:, d].long()
                got = slot >= 0
                at = (start[d] + slot).clamp(min=0)
                acc = torch.where(got[:, None], acc + rows[at].float(), acc)
                if out_w is not None:
                    out_w += torch.where(got[:, None], weights[at], 0.0)
            return acc.bfloat16(), out_w
        for k in range(K):
            if multi:
                # One row per receiving rank, added at that rank's last top-k slot (upstream's order).
                last = valid[:, k].clone()
                for q in range(k + 1, K):
                    last &= ~(valid[:, q] & (owner[:, q] == owner[:, k]))
                at = (start[owner[:, k]] + torch.gather(plan.dst_slot.long(), 1, owner[:, k:k + 1]).squeeze(1))
                acc = torch.where(last[:, None], acc + rows[at.clamp(min=0)].float(), acc)
            else:
                at = start[owner[:, k]] + plan.exp_pos[:, k].long()
                term = rows[at.clamp(min=0)].float()
                if slot_weights is not None:
                    term = slot_weights[:, k:k + 1] * term
                acc = torch.where(valid[:, k:k + 1], acc + term, acc)
            if out_w is not None:  # V2: the value held by the rank owning slot k's expert
                out_w[:, k] = torch.where(valid[:, k], weights[at.clamp(min=0), k if multi else 0], 0.0)
        return acc.bfloat16(), out_w


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t
