"""The V1 low-latency kernels over shared memory: one host-kernel call per dispatch and per combine
(host/ll_dispatch.cpp, host/ll_combine.cpp). Each call does its own handshake, signalling and
bounded waits through deepjit.symm's functions; Python only checks the arguments once and turns
the kernel's status into exceptions (the same ones on every rank).

The EP region of each rank is split into two low-latency areas used by alternate operations (see
host/ll_common.hpp): [control block][data]. Dispatch data: this rank's staged tokens (FP8-cast)
and its route table, which the destinations pull from; combine data: ``M * K`` BF16 rows, one per
(source token, top-k slot), pushed by the ranks that hold the experts.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from deepjit import descriptors
from deepjit import validation as V
from deepjit.host_memory import OutputPool

from .._lib import kernel, launch_args
from ..utils.math import align
from .checks import check_low_latency_combine, check_low_latency_dispatch, expert_id_error

SIG_WORDS = 16
SIG_ERR = 8
OP_DISPATCH, OP_COMBINE = 11, 12
_SIG_NAMES = ("operation", "hidden", "num_topk", "num_max_dispatch_tokens_per_rank", "num_experts",
              "FP8 options", "", "")
PAGE = 4096


def ctrl_bytes(num_ranks: int, num_local_experts: int) -> int:
    return align(num_ranks * SIG_WORDS * 8 + num_ranks * num_ranks * num_local_experts * 4, PAGE)


@dataclass(frozen=True)
class DispatchArea:
    x_off: int       # staging rows [M][H * element size]
    sf_off: int      # staging scale bytes [M][sf_bytes]
    route_off: int   # route table [R][route_cap] int32
    route_cap: int
    end: int

    @staticmethod
    def of(R: int, M: int, H: int, e_local: int, K: int, x_elem: int, sf_bytes: int) -> DispatchArea:
        route_cap = M * min(K, e_local)   # a token goes to one rank at most min(K, E_local) times
        x_off = ctrl_bytes(R, e_local)
        sf_off = x_off + align(M * H * x_elem, PAGE)
        route_off = sf_off + align(M * sf_bytes, PAGE)
        return DispatchArea(x_off, sf_off, route_off, route_cap, route_off + align(R * route_cap * 4, PAGE))


def combine_row_bytes(H: int, logfmt: bool) -> int:
    """A combine row's slot: BF16, or LogFMT-10 (host/logfmt.hpp: per 128-channel block 4 bytes of
    meta and room for the block in BF16)."""
    return -(-H // 128) * (4 + 256) if logfmt else 2 * H


def combine_area_end(R: int, M: int, H: int, e_local: int, K: int) -> int:
    return ctrl_bytes(R, e_local) + align(M * K * combine_row_bytes(H, True), PAGE)


def area_bytes_hint(R: int, M: int, H: int, num_experts: int, num_topk: int) -> int:
    """One area for BF16 or FP8 dispatches and combines of this shape; the region holds two."""
    e_local = max(1, num_experts // R)
    packs = -(-H // 128)
    return max(DispatchArea.of(R, M, H, e_local, num_topk, 2, packs * 4).end,
               combine_area_end(R, M, H, e_local, num_topk))


@dataclass
class LowLatencyState:
    """What a low-latency dispatch leaves in its handle for the combine."""
    topk_idx: torch.Tensor     # the dispatch's routing (combine must be given the same)
    layout_range: torch.Tensor  # [E_local, R] int64: begin << 32 | count of each source's rows
    row_tk: torch.Tensor       # [E_local * R * M] int32: t * K + k of each packed received row
    send_row: torch.Tensor     # [T, K] int32: packed row of each copy at its destination


class LowLatencyEngine:
    def __init__(self, session, region_bytes: int, threads: int):
        self.session = session
        t = session.transport
        self.transport = t
        self.window = t.window
        self.rank, self.num_ranks = t.rank, t.num_ranks
        R = self.num_ranks
        self.area_bytes = region_bytes // 2 // PAGE * PAGE
        self._areas = [torch.tensor([t.region_address(p) + i * self.area_bytes for p in range(R)], dtype=torch.int64)
                       for i in range(2)]
        self._post = self.window.kernel_lanes(0)          # the transport's POSTED lanes
        self._data = self.window.kernel_lanes(2 * R)      # ... and ARRIVED lanes
        self._notify_fn, self._wait_fn, self._abort, self._pidfds = self.window.kernel_wait_context()
        self._status = torch.zeros(4, dtype=torch.int64)
        self._sigs = torch.zeros(R, SIG_WORDS, dtype=torch.int64)
        self.threads = threads
        self.pool = OutputPool()
        self.mask: torch.Tensor | None = None   # shrink mode: [R] int32, nonzero = rank skipped

    # ---- shared steps -----------------------------------------------------------------------------
    def _begin(self):
        seq, follows_own = self.session.start_own_handshake()
        if not follows_own:
            self.session.guard(self.window.barrier)
        return seq

    def _signature(self, words: list[int], error: Exception | None, seq: int) -> torch.Tensor:
        sig = torch.zeros(SIG_WORDS, dtype=torch.int64)
        if error is not None:
            self.transport.post_message(seq, str(error))
            sig[SIG_ERR] = 3
        else:
            sig[: len(words)] = torch.tensor(words, dtype=torch.int64)
        return sig

    def _check_status(self, op: str, seq: int, error: Exception | None) -> None:
        """Turns the kernel's status into the exception every rank raises."""
        status = self._status
        stage = int(status[3])
        if stage in (1, 3):
            def fail():
                self.window.raise_wait_status(status[:3].clone(), seq, f"deep_ep {op} (operation {seq})")
            self.session.guard(fail)
        if error is not None:
            raise error
        if stage != 2:
            return
        sigs = self._sigs.tolist()
        for peer, row in enumerate(sigs):
            code = row[SIG_ERR]
            if code == 3:
                raise ValueError(f"deep_ep {op}: rank {peer} rejected its arguments: "
                                 f"{self.transport.message(seq, peer)}")
            if code in (1, 2):
                t, k, value = row[SIG_ERR + 1: SIG_ERR + 4]
                what = expert_id_error(code, t, k, value, row[4])
                raise ValueError(what if peer == self.rank else f"deep_ep {op}: rank {peer} rejected its arguments: "
                                                                 f"{what}")
        mine = sigs[self.rank]
        for peer, row in enumerate(sigs):
            diff = [f"{n}: rank {self.rank} has {a}, rank {peer} has {b}"
                    for n, a, b in zip(_SIG_NAMES, mine[:SIG_ERR], row[:SIG_ERR], strict=True) if a != b]
            if diff:
                raise ValueError(f"deep_ep {op}: ranks disagree on a collective argument ({', '.join(diff)})")
        raise RuntimeError(f"deep_ep {op}: the low-latency handshake failed without a reason")

    def _fits(self, need: int, what: str) -> None:
        if need > self.area_bytes:
            raise ValueError(f"buffer too small for this {what}: it needs {2 * need} bytes of num_rdma_bytes "
                             f"(two areas of {need}), the buffer has {2 * self.area_bytes}; size it with "
                             f"Buffer.get_low_latency_rdma_size_hint(...)")

    # ---- dispatch ---------------------------------------------------------------------------------
    def dispatch(self, x: torch.Tensor, topk_idx, M: int, num_experts: int, stats, use_fp8: bool,
                 round_scale: bool, use_ue8m0: bool, split: bool):
        """Returns ``(recv_x, recv_count, src_info, layout_range, state, finish)``: ``finish()`` runs
        the receive half (already done unless ``split``)."""
        R = self.num_ranks
        H = x.shape[1]
        error, outputs = None, None
        try:
            outputs = self._dispatch_outputs(x, topk_idx, M, num_experts, stats, use_fp8, use_ue8m0)
        except (TypeError, ValueError) as exc:
            error = exc
        seq = self._begin()
        flags = int(use_fp8) | int(round_scale) << 1 | int(use_ue8m0) << 2
        K = topk_idx.shape[1] if error is None else 0
        sig = self._signature([OP_DISPATCH, H, K, M, num_experts, flags], error, seq)
        if error is not None:
            self.session.guard(lambda: self._dispatch_call(None, None, 0, 0, 0, 1, sig, seq, None))
            self._check_status("low_latency_dispatch", seq, error)
        recv_x, recv_sf, src_info, layout_range, recv_count, state, area = outputs
        e_local = num_experts // R
        args = (x, state.topk_idx, K, e_local, M, sig, seq, (recv_x, recv_sf, src_info, layout_range, recv_count, stats,
                                                       state, area, use_fp8, round_scale, use_ue8m0))
        self.session.guard(lambda: self._dispatch_call(*args[:5], 1, *args[5:]))
        self._check_status("low_latency_dispatch", seq, None)

        def finish():
            def run():
                self._dispatch_call(*args[:5], 2, *args[5:])
                self._check_status("low_latency_dispatch", seq, None)
            self.session.guard(run)

        if not split:
            finish()
        recv = (recv_x, recv_sf) if use_fp8 else recv_x
        return recv, recv_count, src_info, layout_range, state, finish

    def _dispatch_outputs(self, x, topk_idx, M, num_experts, stats, use_fp8, use_ue8m0):
        R = self.num_ranks
        T, H = x.shape
        check_low_latency_dispatch(R, x, topk_idx, M, num_experts, stats)
        if x.stride(1) != 1:
            raise V.fail("x", "contiguous rows (stride(1) == 1)", f"strides {x.stride()}")
        e_local, K = num_experts // R, topk_idx.shape[1]
        blocks = H // 128
        packs = -(-blocks // 4) if use_ue8m0 else blocks
        sf_bytes = packs * 4 if use_fp8 else 0
        area = DispatchArea.of(R, M, H, e_local, K, 1 if use_fp8 else 2, sf_bytes)
        self._fits(area.end, "low-latency dispatch")
        RM = R * M
        pool = self.pool
        recv_x = pool.empty((e_local, RM, H), torch.float8_e4m3fn if use_fp8 else torch.bfloat16)
        recv_sf = None
        if use_fp8:  # token dimension contiguous, as upstream's scales (a transposed view)
            recv_sf = pool.empty((e_local, packs, RM), torch.int32 if use_ue8m0 else torch.float32).transpose(1, 2)
        src_info = pool.empty((e_local, RM), torch.int32)
        layout_range = torch.empty(e_local, R, dtype=torch.int64)
        recv_count = torch.empty(e_local, dtype=torch.int32)
        state = LowLatencyState(topk_idx.clone(), layout_range, pool.empty((e_local * RM,), torch.int32),
                                torch.empty(T, K, dtype=torch.int32))
        return recv_x, recv_sf, src_info, layout_range, recv_count, state, area

    def _dispatch_call(self, x, topk_idx, K, e_local, M, phase, sig, seq, outs):
        R = self.num_ranks
        if outs is None:  # this rank's arguments were rejected: take part in the handshake only
            recv_x = recv_sf = src_info = layout_range = recv_count = stats = row_tk = send_row = None
            area, fp8, round_scale, ue8m0, T, H, x_stride = DispatchArea(0, 0, 0, 0, 0), 0, 0, 0, 0, 0, 0
        else:
            recv_x, recv_sf, src_info, layout_range, recv_count, stats, state, area, fp8, round_scale, ue8m0 = outs
            row_tk, send_row = state.row_tk, state.send_row
            (T, H), x_stride = x.shape, x.stride(0)
        timeout_ns = int(self.window.timeout_s * 1e9)
        args = launch_args(
            "ll_args.hpp", "LlDispatchArgs", x=x, x_stride=x_stride, T=T, H=H, topk_idx=topk_idx, K=K, R=R,
            E_local=e_local, M=M, rank=self.rank, fp8=int(fp8), round_scale=int(round_scale), ue8m0=int(ue8m0),
            peer_area=self._areas[seq % 2], x_off=area.x_off, sf_off=area.sf_off, route_off=area.route_off,
            route_cap=area.route_cap, sig=sig, sigs_out=self._sigs, notify_fn=self._notify_fn, wait_fn=self._wait_fn,
            abort_word=self._abort, pidfds=self._pidfds, post_notify=self._post[0], post_wait=self._post[1],
            timeout_ns=timeout_ns, seq=seq, status=self._status, phase=phase, recv_x=recv_x, recv_sf=recv_sf,
            src_info=src_info, layout_range=layout_range, recv_count=recv_count, stats=stats, row_tk=row_tk,
            send_row=send_row, mask=self.mask)
        kernel("ep_ll_dispatch")(descriptors.address(args), self.threads)

    # ---- combine ----------------------------------------------------------------------------------
    def combine(self, x, topk_idx, topk_weights, state: LowLatencyState, M: int, H: int, num_experts: int,
                out: torch.Tensor | None, run=None, logfmt: bool = False):
        """Returns ``(combined, event)``: with ``run`` (async mode) the kernel call is handed to
        ``run``, whose event is returned; otherwise it runs now and the event is None."""
        R = self.num_ranks
        error = None
        try:
            x, topk_weights, out = self._combine_args(x, topk_idx, topk_weights, state, M, H, num_experts, out)
        except (TypeError, ValueError) as exc:
            error = exc
        seq = self._begin()
        K = state.topk_idx.shape[1]
        sig = self._signature([OP_COMBINE, H, K, M, num_experts], error, seq)
        e_local = num_experts // R

        def call():
            T = 0 if error is not None else topk_idx.shape[0]
            timeout_ns = int(self.window.timeout_s * 1e9)
            # topk_idx: the dispatch's contiguous copy (the caller's equal tensor may be a strided view)
            ok = error is None
            args = launch_args(
                "ll_args.hpp", "LlCombineArgs", x=x if ok else None, x_row_stride=H,
                topk_idx=state.topk_idx if ok else None, weights=topk_weights if ok else None, T=T, K=K, R=R,
                E_local=e_local, M=M, H=H, rank=self.rank, layout_range=state.layout_range, row_tk=state.row_tk,
                send_row=state.send_row, peer_area=self._areas[seq % 2], rows_off=ctrl_bytes(R, e_local), sig=sig,
                sigs_out=self._sigs, notify_fn=self._notify_fn, wait_fn=self._wait_fn, abort_word=self._abort,
                pidfds=self._pidfds, data_notify=self._data[0], data_wait=self._data[1], timeout_ns=timeout_ns,
                seq=seq, status=self._status, out=out if ok else None, mask=self.mask, logfmt=int(bool(logfmt)))
            kernel("ep_ll_combine")(descriptors.address(args), self.threads)
            self._check_status("low_latency_combine", seq, error)
            return out

        if error is not None or run is None:
            return self.session.guard(call), None
        return out, run(lambda: self.session.guard(call))

    def _combine_args(self, x, topk_idx, topk_weights, state, M, H, num_experts, out):
        R = self.num_ranks
        e_local = num_experts // R
        check_low_latency_combine(x, topk_idx, topk_weights, state.topk_idx, (e_local, R * M, H), out)
        x = x.contiguous()
        T, K = topk_idx.shape
        if out is None:
            out = torch.empty(T, H, dtype=torch.bfloat16)
        self._fits(combine_area_end(R, M, H, e_local, K), "low-latency combine")
        return x, topk_weights.contiguous(), out
