"""The Ascend engine's dispatch / combine steps over the symmetric window (the default where the ranks
share one: transport_choice.py):
the count rows, the payloads and the combined rows move by the kernels of symm_exchange.py, so the
dispatch without CPU sync (token-major or expanded) and its combine read nothing back on the host and call no
``all_to_all``. Outputs are whole-capacity tensors: which rows hold tokens is decided on the device
from the exchanged row starts (bucketize / where), never by a host-sized slice.

Token-major and expanded layouts both move this way (expanded rows are unpacked into the per-expert
layout by the engine's kernel, from the exchanged counts, on the device). The engine keeps its
collective steps for rows wider than the exchange's UB row buffer and for groups that share no
symmetric memory (or ``EP_ASCEND_TRANSPORT=hccl``). The ``topk_idx`` error words travel with the counts but are
read (and raised) only with ``EP_ASCEND_CHECKS=1``: invalid ids are dropped on the device otherwise,
as deep_gemm's Ascend path clamps bad layouts.
"""
from __future__ import annotations

import math
import os

import torch

from . import routing
from .reduce import combine_reduce
from .symm_exchange import SymmExchange


def checks_on() -> bool:
    return os.environ.get("EP_ASCEND_CHECKS", "") == "1"


class SymmSteps:
    """The window-backed steps of one ``AscendEngine`` (its staging buffers, its group)."""

    def __init__(self, engine, group, timeout_s: float):
        self.engine, self.group, self.timeout_s = engine, group, timeout_s
        self.exchange: SymmExchange | None = None

    def _ready(self, max_rows: int, row_bytes: int, device) -> SymmExchange:
        """The exchange, (re)created collectively when a call needs more rows or wider rows than it has:
        every rank makes the same calls with the same sizes (the handshake compared them)."""
        ex = self.exchange
        if ex is None or ex.max_rows < max_rows or ex.max_row_bytes < row_bytes:
            rows = max(max_rows, ex.max_rows if ex else 0)
            width = max(row_bytes, ex.max_row_bytes if ex else 0)
            if ex is not None:
                ex.destroy()
            self.exchange = ex = SymmExchange(self.group, rows, width, device, self.timeout_s)
        return ex

    def _move(self, ex, name: str, rows: torch.Tensor, pos, counts, capacity: int):
        """``rows`` through the window; ``(received rows [capacity, ...], row_start [R + 1])`` in staging."""
        stage = self.engine.exchange.staging
        out = stage(f"symm_{name}", capacity, tuple(rows.shape[1:]), rows.dtype)
        start = stage(f"symm_{name}_start", self.engine.num_ranks + 1, (), torch.int32)
        ex.exchange(rows.contiguous(), pos, counts, out, start)
        return out, start

    # ---- dispatch ----------------------------------------------------------------------------
    def exchange_counts(self, a, plan, err) -> None:
        eng = self.engine
        R, M, K = eng.num_ranks, a.num_max_tokens_per_rank, a.num_topk
        C = plan.send_counts.shape[1]
        widths = [a.hidden * max(a.x.element_size(), 2), (2 + 2 * K) * 8, K * 4, (R * C + routing.ERR_WORDS) * 4]
        if a.sf is not None:
            widths.append(math.prod(a.sf.shape[1:]) * a.sf.element_size())   # not sf[0]: a rank may have no token
        ex = self._ready(M, max(widths), a.x.device)
        # Every rank's whole count matrix row goes to every rank (the V1 facade reports all of them).
        row = torch.cat([plan.send_counts.reshape(-1).int(), err.int()])
        eye = torch.eye(R, dtype=torch.bool, device=a.x.device)
        got, _ = self._move(ex, "counts", row[None, :].expand(R, -1), torch.where(eye, 0, -1).int(),
                            torch.ones(R, dtype=torch.int32, device=a.x.device), R)
        if checks_on():
            for peer in range(R):
                msg = routing.error_message(got[peer, R * C:].tolist(), a.num_experts)
                if msg is not None:
                    raise ValueError(msg if peer == eng.rank else f"deep_ep dispatch: rank {peer} rejected its "
                                                                 f"arguments: {msg}")
        plan.all_counts = got[:, :R * C].reshape(R, R, C).clone()
        plan.send_counts = plan.all_counts[eng.rank].contiguous()
        plan.recv_counts = plan.all_counts[:, eng.rank].contiguous()
        tokens = plan.recv_counts[:, 0].long()
        plan.row_start = torch.cat([tokens.new_zeros(1), torch.cumsum(tokens, 0)]).int()
        # The received-row count is read only where the caller asked for a CPU sync (it sizes the outputs); a
        # cached dispatch keeps its handle's row count (its outputs and its combine's check use it).
        if a.handle is not None:
            plan.num_rows = a.handle.num_recv_tokens
        else:
            plan.num_rows = int(plan.row_start[-1]) if a.do_cpu_sync else R * M

    def send(self, a, plan, per_destination) -> None:
        """``per_destination``: the engine's ``(ints [T * R, 2 + 2K], weights [T * R, K] or None)`` rows,
        one per (token, destination rank)."""
        eng = self.engine
        R, M = eng.num_ranks, a.num_max_tokens_per_rank
        ex = self.exchange
        pos, counts = plan.dst_slot.contiguous(), plan.send_tokens.int().contiguous()
        got = {}
        got["x"], got["start"] = self._move(ex, "x", a.x, pos, counts, R * M)
        if a.sf is not None:
            got["sf"], _ = self._move(ex, "sf", a.sf, pos, counts, R * M)
        # Row t * R + d goes to rank d only, at token t's slot there.
        eye = torch.eye(R, dtype=torch.bool, device=a.x.device)
        pair_pos = torch.where(eye[None], plan.dst_slot[:, :, None], -1).reshape(-1, R).int().contiguous()
        ints, weights = per_destination
        got["ints"], _ = self._move(ex, "ints", ints, pair_pos, counts, R * M)
        if weights is not None:
            got["w"], _ = self._move(ex, "w", weights, pair_pos, counts, R * M)
        eng._got = got

    def receive(self, a, plan, out) -> None:
        eng = self.engine
        R, K, M = eng.num_ranks, a.num_topk, a.num_max_tokens_per_rank
        got, eng._got = eng._got, None
        meta = out.recv_src_metadata
        cap = meta.shape[0]                       # received-row capacity (expanded outputs have more rows)
        held, src = _holders(plan.row_start, cap, R)
        ints = got["ints"][:cap]
        meta[:, 0] = torch.where(held, src * M + ints[:, 0], -1).int()
        meta[:, 1] = torch.where(held, src * K + ints[:, 1], -1).int()
        local = torch.where(held[:, None], ints[:, 2:2 + K], -1)
        if a.do_expand:
            eng.unpack_expanded(a, plan, out, got, src, local, ints[:, 2 + K:])
        else:
            _rows(out.recv_x).copy_(_rows(got["x"][:cap]))
            if out.recv_sf is not None:
                out.recv_sf.copy_(got["sf"][:cap])
            out.recv_topk_idx.copy_(local)
            if out.recv_topk_weights is not None:
                out.recv_topk_weights.copy_(torch.where(held[:, None], got["w"][:cap], 0.0))
        if a.stats is not None:
            a.stats += out.true_per_expert.to(a.x.device)

    # ---- combine -----------------------------------------------------------------------------
    def combine_send(self, c, multiple_reduction: bool) -> None:
        """Received rows back to their sources, into ``engine._back`` in the collective transport's layout
        (rows from each rank back to back in rank order), so the engine's reduction is the same: one row
        per received token (token-major, or an expanded token's local slots summed from the first, as the
        collective path sums them), or with ``multiple_reduction=False`` every expanded (token, slot) row."""
        eng = self.engine
        h, plan = c.handle, c.handle._plan
        R, T, dev = eng.num_ranks, h._topk_idx.shape[0], c.x.device
        x, w = c.x, c.topk_weights
        if h.do_expand:
            slots = h.recv_src_metadata[:, 2:]
            if not multiple_reduction:
                self._pairs_back(c, slots)
                return
            x = combine_reduce(c.x, slots, from_first=True)
            if w is not None:
                s = slots.long()
                w = torch.where(s >= 0, w[s.clamp(min=0)], 0.0)
        rows = x.shape[0]
        ex = self._ready(h.num_max_tokens_per_rank, plan.hidden * 2, dev)
        held, src = _holders(plan.row_start, rows, R)
        slot = torch.arange(rows, device=dev) - plan.row_start.long()[src]
        back_pos = torch.where(held[:, None] & (src[:, None] == torch.arange(R, device=dev)[None, :]),
                               slot[:, None], -1).int().contiguous()
        counts = plan.recv_tokens.int().contiguous()
        back, _ = self._move(ex, "back", x, back_pos, counts, T * R)
        back_w = None
        if w is not None:
            back_w, _ = self._move(ex, "back_w", w[:rows].float(), back_pos, counts, T * R)
        eng._back = (back, back_w, True)

    def _pairs_back(self, c, slots) -> None:
        """Every (received token, local slot) row back to its source, in (token, slot) order per source."""
        eng = self.engine
        h, plan = c.handle, c.handle._plan
        R, T, K, dev = eng.num_ranks, h._topk_idx.shape[0], h.num_topk, c.x.device
        m = slots.shape[0]
        held, src = _holders(plan.row_start, m, R)
        s = slots.long()
        has = (s >= 0) & held[:, None]
        per_row = has.sum(1)
        before = torch.cat([per_row.new_zeros(1), torch.cumsum(per_row, 0)])          # pairs before each row
        first = before[plan.row_start.long().clamp(max=m)]                           # first pair of each source
        at = before[:m, None] + torch.cumsum(has.long(), 1) - 1 - first[src][:, None]  # [m, K] within its source
        pos = torch.where(has[:, :, None] & (src[:, None, None] == torch.arange(R, device=dev)),
                          at[:, :, None], -1).reshape(m * K, R).int().contiguous()
        ex = self._ready(h.num_max_tokens_per_rank * K, plan.hidden * 2, dev)
        rows = c.x[s.clamp(min=0)].reshape(m * K, plan.hidden)
        back, _ = self._move(ex, "back_pairs", rows, pos, plan.recv_pairs.int().contiguous(), T * K)
        eng._back = (back, None, False)

    def destroy(self) -> None:
        if self.exchange is not None:
            self.exchange.destroy()
            self.exchange = None


def _holders(row_start: torch.Tensor, capacity: int, R: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(held [capacity] bool, source rank [capacity] int64)`` of received rows, from the row starts."""
    i = torch.arange(capacity, device=row_start.device)
    src = torch.bucketize(i, row_start[1:].long(), right=True).clamp(max=R - 1)
    return i < row_start[-1], src


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t
