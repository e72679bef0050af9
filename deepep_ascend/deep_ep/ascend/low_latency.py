"""The V1 low-latency kernels for NPU tensors (and CPU tensors under ``EP_BACKEND=ascend``): every
buffer has a fixed size, ``num_max_dispatch_tokens_per_rank`` (M) rows per rank pair, and every
all-to-all has equal splits, so a step reads nothing back from the device and can be captured.

Dispatch packs each token once per destination rank into slot ``d * M + (its index among the
tokens for d)`` (the FP8 cast fused into the pack), with a metadata row per slot (source token, and
per top-k slot the local expert and the token's index among this rank's tokens for it; -1 in
unused slots). The receiver counts its rows per (source, local expert) on the device and unpacks
them into upstream's packed layout ``[E_local, R * M]`` (expert, then source rank, then token).
Combine sends every expert output row back to slot ``(d * M + i) * K + k`` and the source adds them
weighted, in top-k order, from 0 in FP32 (the reduce kernel), as upstream.

Expert ids outside ``[-1, num_experts)`` and repeated ones are treated as -1 here (checking them
would read the device); the normal dispatch reports them.

Transports (transport_choice.py): where the ranks share symmetric memory (the default,
``EP_ASCEND_TRANSPORT=auto``, or ``symm``) the payload, scale and metadata rows and the combine's rows
move by kernel-initiated writes into the peers' symmetric windows (ll_window.py: no host read, no
collective); otherwise (``hccl``, or a group the window cannot span: ranks on several hosts) with
equal-split ``all_to_all_single`` collectives (transport.py: any group). Both have the same row layout,
so the results are the same bit for bit. Rows wider than the window's UB row buffer take the
collectives per call (except in shrink mode, which needs the window: those are refused).

Shrink mode (``enable_shrink=True``) needs the window: the rank mask lives in it, on the device, and the
kernels skip masked ranks (neither sent to nor waited for; their slots read as empty, their experts add
nothing to a combined token) and mask a rank whose wait times out instead of failing. The collectives
cannot leave a rank out of an ``all_to_all`` (a dead rank fails it for everyone), so the collective
transport refuses ``enable_shrink``. In shrink mode the operations skip the argument handshake (a
collective every rank must join, which a failed rank never does): a rank's bad arguments raise on that
rank only, and its peers mask it when their waits time out, as upstream's kernels would.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from deepjit import validation as V

from ..engine.checks import check_low_latency_combine, check_low_latency_dispatch
from . import routing
from .fp8_pack import pack_fp8
from .ll_window import LowLatencyWindow
from .reduce import combine_reduce
from .scatter import scatter_rows
from .symm_exchange import MAX_ROW_BYTES
from .transport import CollectiveExchange
from .transport_choice import uses_window

_DISPATCH_NAMES = ("operation", "hidden", "num_topk", "num_max_dispatch_tokens_per_rank", "num_experts", "FP8 options")
_COMBINE_NAMES = ("operation", "hidden", "num_topk", "num_max_dispatch_tokens_per_rank", "num_experts")


@dataclass
class AscendLowLatencyState:
    """What a low-latency dispatch leaves in its handle for the combine."""
    topk_idx: torch.Tensor     # [T, K] the dispatch's routing (invalid ids as -1)
    dst_slot: torch.Tensor     # [T, R] index of token t among the tokens sent to rank d, -1 if none
    target: torch.Tensor       # [R * M, K] packed row of each received (slot, top-k slot), -1 if none


class AscendLowLatencyEngine:
    def __init__(self, session):
        self.session = session
        self.rank, self.num_ranks = session.rank, session.num_ranks
        self.exchange = CollectiveExchange(session.group, session.device, session.timeout_s)
        self.window = (LowLatencyWindow(session.group, session.device, session.timeout_s) if uses_window(session)
                       else None)
        self.shrink = False

    # ---- shrink mode: the rank mask in the window ---------------------------------------------------
    @property
    def mask(self):
        return None

    @mask.setter
    def mask(self, value):
        """The buffer's ``enable_shrink=True`` (``value``: the initial all-zero mask)."""
        if self.window is None:
            raise V.fail("enable_shrink", "False on the Ascend engine without the symmetric window (the rank "
                         "mask lives in the low-latency symmetric window; all_to_all collectives cannot leave a "
                         "rank out; enable_shrink needs ranks that share symmetric memory and EP_ASCEND_TRANSPORT "
                         "auto or symm, not hccl)", True)
        if not self.window.window.timeout_s > 0:   # a dead rank is found by a wait timing out
            raise V.fail("enable_shrink", "a low-latency window with a timeout (masks come from waits that time "
                         "out)", f"timeout {self.window.window.timeout_s} s")
        self.window.write_mask(value)
        self.shrink = True

    def update_mask(self, rank: int, masked: bool) -> None:
        self.window.set_mask(rank, int(bool(masked)))

    def query_mask(self, out: torch.Tensor) -> None:
        win_dev = torch.device(self.window.window.device)
        if out.device == win_dev and out.is_contiguous():
            self.window.read_mask(out)
        else:
            out.copy_(self.window.read_mask())

    def clean_mask(self) -> None:
        self.window.write_mask(torch.zeros(self.num_ranks, dtype=torch.int32))

    def destroy(self) -> None:
        if self.window is not None:
            self.window.destroy()
            self.window = None

    def _start(self, op: str, names: tuple, check) -> list:
        """The handshake (arguments agreed on every rank), or in shrink mode the local checks only."""
        if not self.shrink:
            return self.session.start(op, names, check)
        self.session.start_own_handshake()
        return check()

    # ---- dispatch ---------------------------------------------------------------------------------
    def dispatch(self, x: torch.Tensor, topk_idx, M: int, num_experts: int, stats, use_fp8: bool,
                 round_scale: bool, use_ue8m0: bool, split: bool):
        """Returns ``(recv_x, recv_count, src_info, layout_range, state, finish)``: ``finish()`` runs
        the receive half (already done unless ``split``)."""
        R, (T, H) = self.num_ranks, x.shape

        def check():
            check_low_latency_dispatch(R, x, topk_idx, M, num_experts, stats)
            return [1, H, topk_idx.shape[1], M, num_experts, int(use_fp8) | int(round_scale) << 1 | int(use_ue8m0) << 2]

        self._start("low_latency_dispatch", _DISPATCH_NAMES, check)
        K, e_local, dev, ex = topk_idx.shape[1], num_experts // R, x.device, self.exchange
        plan, _ = routing.plan(topk_idx, H, num_experts, R)
        idx = torch.where(plan.within >= 0, topk_idx, -1)
        slots = R * M
        pos = torch.where(plan.dst_slot >= 0, torch.arange(R, device=dev)[None, :] * M + plan.dst_slot, -1).int()
        send_x = ex.staging("ll_send_x", slots, (H,), torch.float8_e4m3fn if use_fp8 else torch.bfloat16)
        send_sf = None
        if use_fp8:
            send_sf = ex.staging("ll_send_sf", slots, (H // 128,), torch.float32)
            pack_fp8(x, pos, send_x, send_sf, round_scale)
        else:
            scatter_rows(x.contiguous(), pos, send_x)
        valid = idx >= 0
        here = valid[:, None, :] & (torch.where(valid, idx // e_local, R)[:, None, :]
                                    == torch.arange(R, device=dev)[None, :, None])          # [T, R, K]
        meta = torch.cat([torch.arange(T, device=dev)[:, None, None].expand(T, R, 1),
                          torch.where(here, idx[:, None, :] % e_local, -1),
                          torch.where(here, plan.within[:, None, :].long(), -1)], 2).reshape(T * R, 1 + 2 * K)
        send_meta = ex.staging("ll_send_meta", slots + 1, (1 + 2 * K,), torch.int64).fill_(-1)
        send_meta.index_copy_(0, torch.where(pos >= 0, pos, slots).reshape(-1).long(), meta)
        got_x = ex.staging("ll_recv_x", slots, (H,), send_x.dtype)
        got_sf = ex.staging("ll_recv_sf", slots, (H // 128,), torch.float32) if use_fp8 else None
        got_meta = ex.staging("ll_recv_meta", slots, (1 + 2 * K,), torch.int64)
        if self._on_window(H, K):
            self.session.guard(lambda: self._dispatch_window(send_x, send_sf, send_meta, got_x, got_sf, got_meta, M,
                                                             H, K))
        else:
            splits = [M] * R
            ex.all_to_all(got_x, send_x, splits, splits)
            if use_fp8:
                ex.all_to_all(got_sf, send_sf, splits, splits)
            ex.all_to_all(got_meta, send_meta, splits, splits)

        recv_x = torch.empty(e_local, slots, H, dtype=send_x.dtype, device=dev)
        packs = -(-(H // 128) // 4) if use_ue8m0 else H // 128
        recv_sf = None
        if use_fp8:  # token dimension contiguous, as upstream's scales (a transposed view)
            recv_sf = torch.empty(e_local, packs, slots, dtype=torch.int32 if use_ue8m0 else torch.float32,
                                  device=dev).transpose(1, 2)
        src_info = torch.empty(e_local, slots, dtype=torch.int32, device=dev)
        layout_range = torch.empty(e_local, R, dtype=torch.int64, device=dev)
        recv_count = torch.empty(e_local, dtype=torch.int32, device=dev)
        state = AscendLowLatencyState(idx, plan.dst_slot, torch.empty(slots, K, dtype=torch.int32, device=dev))

        def finish():
            self.session.guard(lambda: self._unpack(got_x, got_sf, got_meta, M, e_local, K, use_ue8m0, recv_x, recv_sf,
                                                    src_info, layout_range, recv_count, stats, state))

        if not split:
            finish()
        recv = (recv_x, recv_sf) if use_fp8 else recv_x
        return recv, recv_count, src_info, layout_range, state, finish

    def _on_window(self, H: int, K: int) -> bool:
        """The window for rows that fit its UB row buffer (dispatch and combine decide alike, from the H and K
        every rank agreed on); wider rows take the collectives, except in shrink mode (the window refuses them)."""
        return self.window is not None and (self.shrink or max(2 * H, (1 + 2 * K) * 8) <= MAX_ROW_BYTES)

    def _dispatch_window(self, send_x, send_sf, send_meta, got_x, got_sf, got_meta, M, H, K) -> None:
        """The packed slots through the window: slot ``d * M + i`` to rank ``d``'s slot ``i`` (the rows of
        slots that hold a token; every metadata row, so unused slots arrive as -1)."""
        R, win, dev = self.num_ranks, self.window, send_x.device
        win.ready(M * K, max(2 * H, (1 + 2 * K) * 8))   # the combine's rows too: it never grows the window
        slots = R * M
        j = torch.arange(slots, device=dev)
        own = (j // M)[:, None] == torch.arange(R, device=dev)[None, :]
        meta_pos = torch.where(own, (j % M)[:, None], -1).int()
        used = (send_meta[:slots, 0] >= 0)[:, None]
        row_pos = torch.where(used, meta_pos, -1).contiguous()
        got_meta.fill_(-1)   # a masked source's slots read as empty
        win.exchange(send_x, row_pos, got_x, M, self.shrink)
        if send_sf is not None:
            win.exchange(send_sf, row_pos, got_sf, M, self.shrink)
        win.exchange(send_meta[:slots], meta_pos.contiguous(), got_meta, M, self.shrink)

    def _unpack(self, got_x, got_sf, got_meta, M, e_local, K, use_ue8m0, recv_x, recv_sf, src_info, layout_range,
                recv_count, stats, state):
        R = self.num_ranks
        slots, dev = R * M, got_x.device
        local, within = got_meta[:, 1:1 + K], got_meta[:, 1 + K:]
        has = local >= 0
        source = torch.arange(slots, device=dev) // M
        counts = torch.zeros(R, e_local + 1, dtype=torch.int64, device=dev)
        counts.index_put_((source[:, None].expand(slots, K), torch.where(has, local, e_local)),
                          torch.ones(slots, K, dtype=torch.int64, device=dev), accumulate=True)
        counts = counts[:, :e_local]                                      # [source, local expert]
        begin = torch.cumsum(counts, 0) - counts
        target = torch.where(has, local * slots + begin[source[:, None], local.clamp(min=0)] + within, -1)
        state.target.copy_(target)
        scatter_rows(got_x, state.target, recv_x.view(e_local * slots, -1))
        if got_sf is not None:
            sf = torch.zeros(e_local * slots, got_sf.shape[1], dtype=torch.float32, device=dev)
            scatter_rows(got_sf, state.target, sf)
            if use_ue8m0:  # four biased exponents per int32 word, low byte first
                exps = ((sf.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
                exps = torch.nn.functional.pad(exps, (0, -exps.shape[1] % 4))
                sf = exps.contiguous().view(torch.int32)
            recv_sf.copy_(sf.view(e_local, slots, -1))
        flat = torch.full((e_local * slots + 1,), -1, dtype=torch.int32, device=dev)
        flat.index_copy_(0, torch.where(has, target, e_local * slots).reshape(-1),
                         got_meta[:, :1].expand(slots, K).reshape(-1).int())
        src_info.copy_(flat[:-1].view(e_local, slots))
        layout_range.copy_(((begin << 32) | counts).t())
        recv_count.copy_(counts.sum(0))
        if stats is not None:
            stats += recv_count

    # ---- combine ----------------------------------------------------------------------------------
    def combine(self, x, topk_idx, topk_weights, state: AscendLowLatencyState, M: int, H: int, num_experts: int,
                out: torch.Tensor | None, run=None, logfmt: bool = False):
        """Returns ``(combined, event)``: with ``run`` (async mode) the exchange is handed to ``run``,
        whose event is returned; otherwise it runs now and the event is None. ``logfmt`` changes nothing
        here: the rows travel as BF16 through the collectives (the exact BF16 combine), as they do across
        hosts on the host engine."""
        R = self.num_ranks
        e_local = num_experts // R

        def check():
            check_low_latency_combine(x, topk_idx, topk_weights, state.topk_idx, (e_local, R * M, H), out)
            return [2, H, state.topk_idx.shape[1], M, num_experts]

        self._start("low_latency_combine", _COMBINE_NAMES, check)
        T, K = state.topk_idx.shape
        out = torch.empty(T, H, dtype=torch.bfloat16, device=x.device) if out is None else out

        def call():
            self._combine(x.contiguous(), topk_weights.contiguous(), state, M, H, e_local, out)
            return out

        if run is None:
            return self.session.guard(call), None
        return out, run(lambda: self.session.guard(call))

    def _combine(self, x, topk_weights, state, M, H, e_local, out):
        R, ex = self.num_ranks, self.exchange
        slots = R * M
        T, K = state.topk_idx.shape
        dev = x.device
        has = state.target >= 0
        inv = torch.full((e_local * slots + 1,), -1, dtype=torch.int32, device=dev)
        inv.index_copy_(0, torch.where(has, state.target, e_local * slots).reshape(-1).long(),
                        torch.arange(slots * K, dtype=torch.int32, device=dev))
        send = ex.staging("ll_back_send", slots * K, (H,), torch.bfloat16)
        scatter_rows(x.view(e_local * slots, H), inv[:-1, None], send)
        back = ex.staging("ll_back_recv", slots * K, (H,), torch.bfloat16)
        valid = state.topk_idx >= 0
        if self._on_window(H, K):
            j = torch.arange(slots * K, device=dev)
            to = ((j // (M * K))[:, None] == torch.arange(R, device=dev)[None, :]) & has.reshape(-1, 1)
            self.window.exchange(send, torch.where(to, (j % (M * K))[:, None], -1).int().contiguous(), back, M * K,
                                 self.shrink)
            if self.shrink:  # a masked rank's experts add nothing (its rows did not come)
                masked = self.window.read_mask()
                valid = valid & (masked[torch.where(valid, state.topk_idx // e_local, 0)] == 0)
        else:
            ex.all_to_all(back, send, [M * K] * R, [M * K] * R)
        owner = torch.where(valid, state.topk_idx // e_local, 0)
        slot = torch.gather(state.dst_slot.long(), 1, owner)
        pos = torch.where(valid, (owner * M + slot) * K + torch.arange(K, device=dev)[None, :], -1).int()
        combine_reduce(back, pos, topk_weights, out=out)

