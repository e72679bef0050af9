"""The engine protocol the buffers drive, and the bookkeeping every engine shares.

A buffer runs one engine's steps in order: ``plan`` (local; validates index values) -> the
handshake -> ``exchange_counts`` -> ``allocate`` -> ``send`` -> ``receive``, and for combine
``combine_send`` -> ``combine_reduce``. The engines (``reference/``: plain PyTorch over
``torch.distributed``, the oracle; ``host/``: host kernels over shared memory or the collectives;
``ascend/``: TileLang kernels over HCCL) differ only in how they route and move the data. What the
outputs are, given the exchanged counts, is defined once here: their sizes and initial contents
(``Engine.allocate``) and, for the engines whose combine brings rows back through collectives, which
returned row belongs to which (token, slot) (``ReturnedRows``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..utils.math import align
from .checks import CombineArgs, DispatchArgs
from .plan import RoutePlan


@dataclass
class DispatchOutputs:
    recv_x: torch.Tensor
    recv_sf: torch.Tensor | None
    recv_topk_idx: torch.Tensor | None
    recv_topk_weights: torch.Tensor | None
    recv_src_metadata: torch.Tensor
    psum_per_rank: torch.Tensor
    psum_per_expert: torch.Tensor
    true_per_expert: torch.Tensor
    aligned_list: list
    num_recv_tokens: int
    num_expanded_tokens: int
    pad_rows: torch.Tensor | None


class ReturnedRows(NamedTuple):
    """What a collective engine's combine_send brought back, with the routing its reduction needs: ``rows``
    (and ``weights``) from every rank back to back in rank order, ``start[r]`` the first row from rank
    ``r``; ``multi``: one row per (token, receiving rank) rather than per (token, top-k slot)."""
    rows: torch.Tensor
    weights: torch.Tensor
    multi: bool
    valid: torch.Tensor  # [T, K] slots routed somewhere
    owner: torch.Tensor  # [T, K] the rank holding each slot's expert (0 where not valid)
    start: torch.Tensor  # [R] int64

    @classmethod
    def take(cls, engine, c: CombineArgs) -> ReturnedRows:
        """``engine._back`` (what its combine_send stored), cleared first so a failed reduction leaves
        nothing behind, with the routing of ``c``."""
        (rows, weights, multi), engine._back = engine._back, None
        plan, idx = c.handle._plan, c.handle._topk_idx
        valid = idx >= 0
        owner = torch.where(valid, idx // plan.num_local_experts, 0)
        sent = (plan.send_tokens if multi else plan.send_pairs).long().to(idx.device)
        return cls(rows, weights, multi, valid, owner, torch.cumsum(sent, 0) - sent)


class Engine:
    """One rank's dispatch / combine data movement. Subclasses implement the steps; the capacity
    checks default to none (nothing staged in a fixed-size region)."""

    def __init__(self, rank: int, num_ranks: int, region_bytes: int):
        self.rank = rank
        self.num_ranks = num_ranks
        self.region_bytes = region_bytes

    def check_capacity(self, a: DispatchArgs) -> None:
        pass

    def check_combine_capacity(self, handle, multiple_reduction: bool) -> None:
        pass

    def counts_on_host(self, a: DispatchArgs) -> bool:
        """Whether this dispatch's exchanged counts may be read on the host to size and pad its outputs; an
        engine that moves them on the device only (the Ascend window path) says False, and then only a
        dispatch with ``do_cpu_sync`` reads them (outputs otherwise take their worst-case sizes)."""
        return True

    # ---- the steps ---------------------------------------------------------------------------
    def plan(self, a: DispatchArgs) -> RoutePlan:
        raise NotImplementedError

    def exchange_counts(self, a: DispatchArgs, plan: RoutePlan) -> None:
        raise NotImplementedError

    def send(self, a: DispatchArgs, plan: RoutePlan) -> None:
        raise NotImplementedError

    def receive(self, a: DispatchArgs, plan: RoutePlan, out: DispatchOutputs) -> None:
        raise NotImplementedError

    def combine_send(self, c: CombineArgs, multiple_reduction: bool) -> None:
        raise NotImplementedError

    def combine_reduce(self, c: CombineArgs, sum_weights: bool = False, slot_weights=None, out=None):
        """``(combined, weights)``; ``out`` (from ``combine_output``) receives the combined rows if given."""
        raise NotImplementedError

    def combine_output(self, T: int, H: int, device=None) -> torch.Tensor:
        """The combined rows' tensor on the tokens' device."""
        return torch.empty(T, H, dtype=torch.bfloat16, device=device)

    # ---- the outputs, from the exchanged counts ------------------------------------------------
    def allocate(self, a: DispatchArgs, plan: RoutePlan) -> DispatchOutputs:
        R, K, M, H = self.num_ranks, a.num_topk, a.num_max_tokens_per_rank, a.hidden
        e_local, al = plan.num_local_experts, a.expert_alignment
        per_expert = plan.recv_counts[:, 1:].long()             # [R, E_local]
        true = per_expert.sum(0)
        aligned = (true + al - 1) // al * al
        psum_rank = torch.cumsum(plan.recv_counts[:, 0].long(), 0).int()
        pad_rows = None
        engine_reads = self.counts_on_host(a)
        on_host = engine_reads or a.do_cpu_sync
        if a.do_expand:
            starts = expert_starts(aligned, a.packed_stride)
            psum_expert = (starts + true).int()
            plan.expert_base = (starts[None, :] + torch.cumsum(per_expert, 0) - per_expert).int().contiguous()
            if a.packed_stride:
                plan.num_expanded = e_local * a.packed_stride
            elif on_host:
                plan.num_expanded = int(aligned.sum())
            if a.do_zero_padding and engine_reads:  # no host read where counts stay on the device
                gaps = aligned - true
                first = torch.repeat_interleave(starts + true, gaps)
                offset = torch.arange(int(gaps.sum())) - torch.repeat_interleave(torch.cumsum(gaps, 0) - gaps, gaps)
                pad_rows = first + offset
        else:
            psum_expert = torch.cumsum(aligned, 0).int()
        if a.handle is not None:
            rows, exp_rows = a.handle.num_recv_tokens, a.handle.num_expanded_tokens
        elif a.do_cpu_sync:
            rows, exp_rows = plan.num_rows, plan.num_expanded
        else:
            rows = R * M
            exp_rows = align(R * M * min(K, e_local) + (al - 1) * e_local, al)
        if a.packed_stride:
            exp_rows = e_local * a.packed_stride
        elif a.do_expand and not on_host:
            plan.num_expanded = exp_rows  # every output row may hold a token: combine takes them all
        data_rows = exp_rows if a.do_expand else rows
        packs = 0 if a.sf is None else a.sf.shape[1]
        sf_rows = align(data_rows, 4) if a.col_major_sf else data_rows
        # (name, shape, dtype) of every output; in the shared arena the senders write them directly.
        parts = [("x", (data_rows, H), a.x.dtype)]
        if a.sf is not None:
            parts.append(("sf", (packs, sf_rows) if a.col_major_sf else (sf_rows, packs), a.sf.dtype))
        if not a.do_expand:
            parts.append(("idx", (rows, K), torch.int64))
        if a.topk_weights is not None:
            parts.append(("w", (exp_rows,) if a.do_expand else (rows, K), torch.float32))
        parts.append(("meta", (rows, K + 2), torch.int32))
        t, direct = self._output_tensors(parts, a, plan)
        n = plan.num_rows
        recv_sf = t.get("sf")
        if recv_sf is not None and a.col_major_sf:
            recv_sf = recv_sf.T[:data_rows]
        # Rows the senders write directly need no initialisation; the rest reads as "no token".
        first_unwritten = n if direct else 0
        if "idx" in t:
            t["idx"][first_unwritten:].fill_(-1)
        if "w" in t:
            t["w"].zero_()
        t["meta"][first_unwritten:].fill_(-1)
        dev = a.x.device  # the handle's count tensors live with the outputs (a no-op on CPU)
        out = DispatchOutputs(t["x"], recv_sf, t.get("idx"), t.get("w"), t["meta"], psum_rank.to(dev),
                              psum_expert.to(dev), true.int().to(dev), aligned.tolist() if a.do_cpu_sync else [],
                              rows, exp_rows, pad_rows)
        out.direct = direct
        return out

    def _output_tensors(self, parts, a: DispatchArgs, plan: RoutePlan) -> tuple[dict, bool]:
        """``({name: tensor}, direct)`` for ``parts`` (name, shape, dtype): fresh tensors on the tokens'
        device; ``direct`` (the senders write them in place) is an engine's own transport matter."""
        return {name: torch.empty(shape, dtype=dtype, device=a.x.device) for name, shape, dtype in parts}, False


def expert_starts(aligned: torch.Tensor, packed_stride: int = 0) -> torch.Tensor:
    """First expanded row of each local expert: aligned counts back to back, or a fixed stride."""
    if packed_stride:
        return torch.arange(aligned.shape[0], device=aligned.device) * packed_stride
    return torch.cumsum(aligned, 0) - aligned
