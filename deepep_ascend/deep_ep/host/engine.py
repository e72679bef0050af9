"""Dispatch and combine data movement on CPU tensors: host kernels over either transport (the steps
of ``engine.base.Engine``; ``receive`` is the copy epilogue)."""
from __future__ import annotations

import math

import torch

from deepjit import descriptors
from deepjit.host_memory import OutputPool

from .._lib import kernel, launch_args
from ..engine.base import DispatchOutputs, Engine, expert_starts
from ..engine.checks import CombineArgs, DispatchArgs, expert_id_error
from ..engine.layout import COUNTS_BYTES, RowLayout, SlotLayout, combine_bytes, dispatch_bytes
from ..engine.plan import RoutePlan
from ..utils.math import align


class HostEngine(Engine):
    """Host kernels over the session's transport: byte slots in shared memory (receivers may publish
    their outputs in the arena for the senders to write directly) or the collectives."""

    def __init__(self, transport, rank: int, num_ranks: int, region_bytes: int, threads: int):
        super().__init__(rank, num_ranks, region_bytes)
        self.transport = transport
        self.threads = threads
        self._err = torch.zeros(4, dtype=torch.int64)
        self.pool = OutputPool()

    # ---- dispatch ----------------------------------------------------------------------------
    def slot_layout(self, a: DispatchArgs) -> SlotLayout:
        packs = 0 if a.sf is None else a.sf.shape[1]
        return SlotLayout.of(a.hidden, a.x.element_size(), packs, a.num_topk)

    def check_capacity(self, a: DispatchArgs) -> None:
        need = dispatch_bytes(self.num_ranks, a.num_max_tokens_per_rank, self.slot_layout(a))
        if need > self.region_bytes:
            raise ValueError(f"buffer too small for this dispatch: num_max_tokens_per_rank="
                             f"{a.num_max_tokens_per_rank}, hidden={a.hidden}, num_topk={a.num_topk} need {need} "
                             f"bytes, the buffer has {self.region_bytes}; create it with get_buffer_size_hint(...)")

    def plan(self, a: DispatchArgs) -> RoutePlan:
        T, K, R = a.num_tokens, a.num_topk, self.num_ranks
        e_local = a.num_experts // R
        dst_slot = torch.empty(T, R, dtype=torch.int32)
        within = torch.empty(T, K, dtype=torch.int32)
        exp_pos = torch.empty(T, K, dtype=torch.int32)
        send_count = torch.empty(R, dtype=torch.int32)
        expert_count = torch.empty(R, e_local, dtype=torch.int32)
        args = launch_args("dispatch_args.hpp", "DispatchPlanArgs", topk_idx=a.topk_idx, T=T, K=K, R=R, E_local=e_local,
                           dst_slot=dst_slot, send_count=send_count, expert_count=expert_count, within=within,
                           exp_pos=exp_pos, err=self._err)
        kernel("ep_dispatch_plan")(descriptors.address(args))
        code, t, k, value = self._err.tolist()
        if code in (1, 2):
            raise ValueError(expert_id_error(code, t, k, value, a.num_experts))
        return RoutePlan(a.hidden, R, e_local, dst_slot, within, exp_pos,
                         torch.cat([send_count[:, None], expert_count], 1))

    @property
    def _shm(self) -> bool:
        return self.transport is not None and self.transport.kind == "shm"

    def exchange_counts(self, a: DispatchArgs, plan: RoutePlan) -> None:
        self.transport.post_counts(plan.send_counts)
        plan.all_counts = self.transport.recv_counts()    # every rank's rows: [source, destination, C]
        plan.recv_counts = plan.all_counts[:, self.rank].contiguous()
        tokens = plan.recv_counts[:, 0].long()
        plan.row_start = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(tokens, 0)]).int()
        plan.num_rows = int(plan.row_start[-1])

    def allocate(self, a: DispatchArgs, plan: RoutePlan) -> DispatchOutputs:
        out = super().allocate(a, plan)
        if plan.layout_round:
            self._publish(out)
        return out

    def _output_tensors(self, parts, a: DispatchArgs, plan: RoutePlan) -> tuple[dict, bool]:
        # Without CPU sync every rank's outputs have the same worst-case size; when that exceeds the
        # arena (e.g. the packed low-latency layout), every rank knows that no one writes directly
        # and the layout round is skipped.
        plan.layout_round = self._shm and not (a.handle is None and not a.do_cpu_sync
                                               and _block_bytes(parts) > self.transport.arena_bytes)
        t = self._direct_outputs(parts) if plan.layout_round else None
        if t is not None:
            return t, True
        return self._private_outputs(parts, a.x.device), False

    def _private_outputs(self, parts, device) -> dict:
        out = {}
        for name, shape, dtype in parts:
            if device.type == "cpu":
                out[name] = self.pool.empty(shape, dtype)
            else:
                out[name] = torch.empty(shape, dtype=dtype, device=device)
        return out

    def _direct_outputs(self, parts) -> dict | None:
        sizes = [align(math.prod(shape) * dtype.itemsize, 64) for _, shape, dtype in parts]
        block = self.transport.arena_alloc(sum(sizes))
        if block is None:
            return None
        out, off = {}, 0
        for (name, shape, dtype), size in zip(parts, sizes, strict=True):
            nbytes = math.prod(shape) * dtype.itemsize
            out[name] = block[off:off + nbytes].view(dtype).view(shape)
            off += size
        return out

    def _publish(self, out: DispatchOutputs) -> None:
        """Tell the senders where this rank's outputs are (arena byte offsets), or that it has none."""
        if not out.direct:
            self.transport.publish_layout([0])
            return
        off = self.transport.arena_offset_of
        sf, elem = out.recv_sf, out.recv_x.element_size()
        words = [1, off(out.recv_x), out.recv_x.stride(0) * elem,
                 -1 if sf is None else off(sf), 0 if sf is None else sf.stride(0) * 4,
                 0 if sf is None else sf.stride(1) * 4,
                 -1 if out.recv_topk_idx is None else off(out.recv_topk_idx),
                 -1 if out.recv_topk_weights is None else off(out.recv_topk_weights), off(out.recv_src_metadata)]
        self.transport.publish_layout(words)

    def _direct_targets(self, a: DispatchArgs, plan: RoutePlan):
        """Per destination: output addresses (or zeros for slot mode), the first output row of this
        rank's tokens, and (expanded) the first row of each local expert for this rank's tokens."""
        layouts = self.transport.peer_layouts()
        R, me = self.num_ranks, self.rank
        if not bool((layouts[:, 0] == 1).any()):
            return None, None, None
        direct = torch.zeros(R, 8, dtype=torch.int64)
        for d in range(R):
            w = layouts[d].tolist()
            if w[0] != 1:
                continue
            base = self.transport.arena_address(d)
            direct[d] = torch.tensor([_address(base, w[1]), w[2], _address(base, w[3]), w[4], w[5],
                                      _address(base, w[6]), _address(base, w[7]), _address(base, w[8])])
        counts = plan.all_counts.long()                  # [source, destination, 1 + E_local]
        row_base = counts[:me, :, 0].sum(0).int()
        expert_base = None
        if a.do_expand:
            true = counts[:, :, 1:].sum(0)               # [destination, E_local]
            al = a.expert_alignment
            aligned = (true + al - 1) // al * al
            starts = torch.stack([expert_starts(aligned[d], a.packed_stride) for d in range(R)])
            expert_base = (starts + counts[:me, :, 1:].sum(0)).int().contiguous()
        return direct, row_base, expert_base

    def send(self, a: DispatchArgs, plan: RoutePlan) -> None:
        R, K, M = self.num_ranks, a.num_topk, a.num_max_tokens_per_rank
        slot = self.slot_layout(a)
        direct = row_base = expert_base = None
        if plan.layout_round:
            direct, row_base, expert_base = self._direct_targets(a, plan)
        base = self.transport.send_bases(plan.send_tokens, slot.slot_bytes, COUNTS_BYTES, M * slot.slot_bytes)
        sf = a.sf
        args = launch_args(
            "dispatch_args.hpp", "DispatchSendArgs", x=a.x, x_row_stride=a.x.stride(0) * a.x.element_size(),
            x_row_bytes=slot.x_bytes, sf=sf, sf_row_stride=0 if sf is None else sf.stride(0) * 4,
            sf_col_stride=0 if sf is None else sf.stride(1) * 4, num_packs=0 if sf is None else sf.shape[1],
            topk_idx=a.topk_idx, weights=a.topk_weights, T=a.num_tokens, K=K, R=R, E_local=plan.num_local_experts,
            dst_slot=plan.dst_slot, within=plan.within, dst_base=base, slot_bytes=slot.slot_bytes,
            sf_off=slot.sf_off, meta_off=slot.meta_off, direct=direct, row_base=row_base, expert_base=expert_base,
            expand=int(a.do_expand), M=M, rank=self.rank)
        kernel("ep_dispatch_send")(descriptors.address(args), self.threads)
        self.transport.finish_send(plan.send_tokens, plan.recv_tokens, slot.slot_bytes)

    def receive(self, a: DispatchArgs, plan: RoutePlan, out: DispatchOutputs) -> None:
        M = a.num_max_tokens_per_rank
        slot = self.slot_layout(a)
        base = self.transport.recv_bases(plan.recv_tokens, slot.slot_bytes, COUNTS_BYTES, M * slot.slot_bytes)
        if not out.direct:
            self._copy_out(a, plan, out, base, slot)
        self._finish(a, out)

    def _copy_out(self, a: DispatchArgs, plan: RoutePlan, out: DispatchOutputs, base, slot) -> None:
        R, K, M = self.num_ranks, a.num_topk, a.num_max_tokens_per_rank
        sf = out.recv_sf
        args = launch_args(
            "dispatch_args.hpp", "DispatchRecvArgs", src_base=base, row_start=plan.row_start, R=R, K=K, M=M,
            E_local=plan.num_local_experts, x_row_bytes=slot.x_bytes, out_x=out.recv_x,
            out_x_stride=out.recv_x.stride(0) * out.recv_x.element_size(), out_sf=sf,
            out_sf_row_stride=0 if sf is None else sf.stride(0) * 4,
            out_sf_col_stride=0 if sf is None else sf.stride(1) * 4, num_packs=0 if sf is None else sf.shape[1],
            out_topk_idx=out.recv_topk_idx, out_weights=out.recv_topk_weights, out_meta=out.recv_src_metadata,
            expand=int(a.do_expand), expert_base=plan.expert_base, slot_bytes=slot.slot_bytes, sf_off=slot.sf_off,
            meta_off=slot.meta_off)
        kernel("ep_dispatch_recv")(descriptors.address(args), self.threads)

    def _finish(self, a: DispatchArgs, out: DispatchOutputs) -> None:
        sf = out.recv_sf
        if out.pad_rows is not None and out.pad_rows.numel():
            _bytes(out.recv_x).index_fill_(0, out.pad_rows, 0)
            if sf is not None:
                sf.index_fill_(0, out.pad_rows, 0)
            if out.recv_topk_weights is not None:
                out.recv_topk_weights.index_fill_(0, out.pad_rows, 0)
        if a.stats is not None:
            a.stats += out.true_per_expert

    # ---- combine -----------------------------------------------------------------------------
    def combine_layout(self, handle, multiple_reduction: bool):
        multi = not handle.do_expand or multiple_reduction
        return multi, RowLayout.of(handle._plan.hidden, handle.num_topk)

    def check_combine_capacity(self, handle, multiple_reduction: bool) -> None:
        multi, row = self.combine_layout(handle, multiple_reduction)
        need = combine_bytes(self.num_ranks, handle.num_max_tokens_per_rank, handle.num_topk, row, multi)
        if need > self.region_bytes:
            raise ValueError(f"buffer too small for this combine: need {need} bytes, the buffer has "
                             f"{self.region_bytes}; create it with get_buffer_size_hint(...)")

    def _rows_transport(self, multi: bool):
        """Rows of one (token, slot) each need compact per-source blocks: across hosts they all go
        through the collectives."""
        if not multi and self.transport.kind == "hybrid":
            from ..transport.hybrid import AllRemote
            return AllRemote(self.transport)
        return self.transport

    def combine_send(self, c: CombineArgs, multiple_reduction: bool) -> None:
        h, plan = c.handle, c.handle._plan
        R, K, M = self.num_ranks, h.num_topk, h.num_max_tokens_per_rank
        multi, row = self.combine_layout(h, multiple_reduction)
        by_token = int(not multi and self.transport.kind == "shm")
        row_first = None
        if multi:
            send_rows, recv_rows, stride = plan.recv_tokens, plan.send_tokens, M * row.row_bytes
        else:
            send_rows, recv_rows, stride = plan.recv_pairs, plan.send_pairs, 0
            if not by_token:
                n_local = (h.recv_src_metadata[: plan.num_rows, 2:] >= 0).sum(1)
                before = torch.cumsum(n_local, 0) - n_local
                source = torch.repeat_interleave(torch.arange(R), plan.recv_tokens.long())
                row_first = (before - before[plan.row_start[:-1].long()[source]]).int()
        # Rows of this rank's own tokens stay where they are; the reduce reads them from x. (Expanded
        # rows with multiple reduction are first summed here, so those still travel.)
        keep_local = self._shm and (not h.do_expand or not multi)
        transport = self._rows_transport(multi)
        base = transport.send_bases(send_rows, row.row_bytes, 0, stride)
        args = launch_args("combine_args.hpp", "CombineSendArgs", x=c.x, x_stride=c.x.stride(0), H=plan.hidden,
                           meta=h.recv_src_metadata, row_start=plan.row_start, R=R, K=K, M=M, weights=c.topk_weights,
                           expand=int(h.do_expand), multi=int(multi), by_token=by_token, row_first=row_first,
                           N=plan.num_rows, dst_base=base, row_bytes=row.row_bytes, w_off=row.w_off,
                           skip_source=self.rank if keep_local else -1)
        kernel("ep_combine_send")(descriptors.address(args), self.threads)
        transport.finish_send(send_rows, recv_rows, row.row_bytes)
        self._combine_state = (multi, by_token, row, recv_rows, stride, keep_local)

    def combine_reduce(self, c: CombineArgs, sum_weights: bool = False, slot_weights=None, out=None):
        """``(combined, weights)``; ``out`` (from ``combine_output``) receives the combined rows if given."""
        h, plan = c.handle, c.handle._plan
        multi, by_token, row, recv_rows, stride, keep_local = self._combine_state
        T, K = h._topk_idx.shape
        base = self._rows_transport(multi).recv_bases(recv_rows, row.row_bytes, 0, stride)
        index = plan.dst_slot if multi else (None if by_token else plan.exp_pos)
        if out is None:
            out = self.combine_output(T, plan.hidden)
        out_w = torch.empty(T, K, dtype=torch.float32) if c.topk_weights is not None else None
        b0 = c.bias[0] if len(c.bias) > 0 else None
        b1 = c.bias[1] if len(c.bias) > 1 else None
        args = launch_args("combine_args.hpp", "CombineReduceArgs", out=out, bias0=b0,
                           bias0_stride=0 if b0 is None else b0.stride(0), bias1=b1,
                           bias1_stride=0 if b1 is None else b1.stride(0), topk_idx=h._topk_idx, T=T, K=K,
                           R=self.num_ranks, E_local=plan.num_local_experts, H=plan.hidden, multi=int(multi),
                           block_base=base, index=index, by_token=by_token, row_bytes=row.row_bytes,
                           out_weights=out_w, sum_weights=int(sum_weights), slot_weights=slot_weights,
                           local_x=c.x if keep_local else None, local_stride=c.x.stride(0),
                           local_w=c.topk_weights if keep_local else None, local_row0=int(plan.row_start[self.rank]),
                           local_slot=plan.dst_slot, local_meta=h.recv_src_metadata, rank=self.rank)
        kernel("ep_combine_reduce")(descriptors.address(args), self.threads)
        return out, out_w


    def combine_output(self, T: int, H: int, device=None) -> torch.Tensor:
        """(CPU; ``device`` is for engines serving other devices.) Combined rows in the output arena (shared memory faulted in when the buffer was made)
        when it has room, else from the pool: a fresh multi-megabyte host buffer costs more in page
        faults than the combine itself, and the pool only reuses buffers the caller has released."""
        nbytes = T * H * torch.bfloat16.itemsize
        block = self.transport.arena_alloc(nbytes, from_top=True) if self._shm and self.transport.arena_bytes else None
        if block is None:
            return self.pool.empty((T, H), torch.bfloat16)
        return block[:nbytes].view(torch.bfloat16).view(T, H)


def _block_bytes(parts) -> int:
    return sum(align(math.prod(shape) * dtype.itemsize, 64) for _, shape, dtype in parts)


def _address(base: int, offset: int) -> int:
    return 0 if offset < 0 else base + offset


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t
