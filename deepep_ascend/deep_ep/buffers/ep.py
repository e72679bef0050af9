"""``EPBuffer`` (V2.5): expert-parallel dispatch and combine over one long-lived symmetric buffer."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Union

import torch
import torch.distributed as dist

from deepjit import validation as V

from .. import _dispatch, comm
from ..engine import layout
from ..engine.checks import check_combine, check_dispatch
from ..engine.handle import EPHandle
from ..engine.session import CommSession
from ..utils.event import EventHandle, EventOverlap
from ..utils.math import align
from .allocator import BufferAllocator
from .base import BufferBase

_DISPATCH_SIGNATURE = ("operation", "hidden", "x element size", "scale packs", "scale dtype", "num_topk",
                       "num_max_tokens_per_rank", "num_experts", "expert_alignment", "do_expand", "with topk_weights",
                       "cached handle")
_ARENA_OUTPUTS = 4   # dispatch and combine outputs of each kind that the output arena holds at once
_COMBINE_SIGNATURE = ("operation", "hidden", "num_topk", "num_max_tokens_per_rank", "num_experts", "do_expand",
                      "with topk_weights")


class EPBuffer(BufferBase):
    """Attributes follow upstream: ``group, rank_idx, num_ranks, num_bytes, num_max_tokens_per_rank,
    num_scaleout_ranks, num_scaleup_ranks, scaleout_rank_idx, scaleup_rank_idx, num_rdma_ranks,
    num_nvlink_ranks``. ``transport`` says which transport serves this group ("shm" or "dist")."""

    barrier = comm.barrier
    get_comm_stream = comm.get_comm_stream
    get_physical_domain_size = comm.get_physical_domain_size
    get_logical_domain_size = comm.get_logical_domain_size

    def __init__(self, group: dist.ProcessGroup | None = None, num_bytes: int | None = None,
                 num_max_tokens_per_rank: int = 0, hidden: int = 0, num_topk: int = 0, use_fp8_dispatch: bool = False,
                 lb_allocation_plan_or_num_bytes: Union[BufferAllocator, int] = 0, deterministic: bool = False,
                 allow_hybrid_mode: bool = True, allow_multiple_reduction: bool = True,
                 prefer_overlap_with_compute: bool = True, sl_idx: int | None = None, num_allocated_qps: int = 0,
                 num_cpu_timeout_secs: int = 300, num_gpu_timeout_secs: int = 100, explicitly_destroy: bool = False,
                 *, _output_arena: bool = True):
        super().__init__(explicitly_destroy)
        group = group if group is not None else dist.group.WORLD
        self.group = group
        self.rank_idx = group.rank()
        self.num_ranks = group.size()
        self.deterministic = bool(deterministic)
        self.allow_hybrid_mode = bool(allow_hybrid_mode)
        self.allow_multiple_reduction = bool(allow_multiple_reduction)
        self.prefer_overlap_with_compute = bool(prefer_overlap_with_compute)
        self.num_allocated_qps = num_allocated_qps or 17
        self.num_cpu_timeout_secs = num_cpu_timeout_secs
        if num_bytes is None:
            if num_max_tokens_per_rank <= 0 or hidden <= 0:
                raise V.fail("num_bytes", "a size, or the MoE shape (num_max_tokens_per_rank > 0 and hidden > 0)",
                             f"None with num_max_tokens_per_rank={num_max_tokens_per_rank}, hidden={hidden}")
            num_bytes = layout.buffer_size_hint(self.num_ranks, num_max_tokens_per_rank, hidden, num_topk,
                                                use_fp8_dispatch, allow_multiple_reduction)
        if isinstance(num_bytes, bool) or not isinstance(num_bytes, int) or num_bytes <= 0:
            raise V.fail("num_bytes", "a positive int", repr(num_bytes))
        self.num_bytes = num_bytes
        self.num_max_tokens_per_rank = num_max_tokens_per_rank
        _check_same_shape_on_every_rank(group, num_max_tokens_per_rank, hidden)
        plan = lb_allocation_plan_or_num_bytes if isinstance(lb_allocation_plan_or_num_bytes, BufferAllocator) else None
        self.num_lb_bytes = plan.num_bytes if plan is not None else int(lb_allocation_plan_or_num_bytes)
        # The output arena lets senders write dispatch outputs directly, and holds combine outputs.
        # It holds a new output of each kind while the caller still keeps up to three earlier ones
        # (micro-batches in flight, layer after layer): when it is full, dispatch falls back to
        # private outputs copied out of the receive slots and combine to pooled host memory, and a
        # private output that cannot reuse a released one costs a page fault per page (slower than
        # the operation itself). A dispatch output takes at most the whole region, a combine output
        # (this rank's tokens only) at most a 1/num_ranks share of it. EP_OUTPUT_ARENA=0 turns it off.
        arena = 0
        if _output_arena and os.environ.get("EP_OUTPUT_ARENA", "1") != "0":
            arena = _ARENA_OUTPUTS * (num_bytes + align(num_bytes // self.num_ranks, 4096))
        self._session = CommSession(group, num_bytes + align(self.num_lb_bytes, 4096), float(num_cpu_timeout_secs),
                                    arena_bytes=arena)
        self.transport = self._session.transport_kind
        self._engine = _dispatch.TABLE.run("dispatch_combine", self._session.device, self._session, self.rank_idx,
                                           self.num_ranks, num_bytes)
        self.lb_storage = None
        if self.num_lb_bytes:
            from .lb import lb_storage
            self.lb_storage = lb_storage(self)
            if plan is not None:
                plan.materialize(self.lb_storage)
        self.num_scaleout_ranks, self.num_scaleup_ranks = self.get_logical_domain_size()
        self.scaleout_rank_idx = self.rank_idx // self.num_scaleup_ranks
        self.scaleup_rank_idx = self.rank_idx % self.num_scaleup_ranks
        self.num_rdma_ranks, self.num_nvlink_ranks = self.get_physical_domain_size()
        self.runtime = self._session
        dist.barrier(group=group)

    def _release(self) -> None:
        if not self._destroyed:
            self._session.destroy()
            release = getattr(self._engine, "destroy", None)   # an engine's own window (ascend/symm_steps.py)
            if release is not None:
                release()
        super()._release()

    # ---- static helpers ----------------------------------------------------------------------
    @staticmethod
    def get_buffer_size_hint(group: dist.ProcessGroup, num_max_tokens_per_rank: int, hidden: int, num_topk: int = 0,
                             use_fp8_dispatch: bool = False, allow_hybrid_mode: bool = True,
                             allow_multiple_reduction: bool = True) -> int:
        return layout.buffer_size_hint(group.size(), num_max_tokens_per_rank, hidden, num_topk, use_fp8_dispatch,
                                       allow_multiple_reduction)

    @staticmethod
    def capture() -> EventHandle:
        return EventHandle()

    def get_theoretical_num_sms(self, num_experts: int, num_topk: int, *args, **kwargs) -> int:
        """On CPU the "SM" count is the thread count of one rank's kernels (even, >= 4 upstream)."""
        return max(4, align(self._session.threads, 2))

    def get_theoretical_num_qps(self, num_sms: int) -> int:
        return min(num_sms, 9, self.num_allocated_qps)

    # ---- dispatch ----------------------------------------------------------------------------
    def dispatch(self, x, topk_idx: torch.Tensor | None = None, topk_weights: torch.Tensor | None = None,
                 cumulative_local_expert_recv_stats: torch.Tensor | None = None, num_experts: int | None = None,
                 num_max_tokens_per_rank: int | None = None, expert_alignment: int | None = None,
                 num_sms: int = 0, num_qps: int = 0, previous_event: EventHandle | None = None,
                 async_with_compute_stream: bool = False, allocate_on_comm_stream: bool = False,
                 handle: EPHandle | None = None, do_handle_copy: bool = False, do_cpu_sync: bool | None = None,
                 do_expand: bool = False, do_zero_padding: bool = False, use_tma_aligned_col_major_sf: bool = False,
                 defer_epilogue: bool = False):
        """See the spec (3.3, 4.2). Returns ``(recv_x, recv_topk_idx, recv_topk_weights, handle, event)``,
        or only the ``EventOverlap`` with ``defer_epilogue=True`` (its ``wait()`` returns the four)."""
        self._check_alive()
        if do_handle_copy:
            raise V.fail("do_handle_copy", "False (EPBuffer keeps topk_idx by reference)", repr(do_handle_copy))
        return self._dispatch(x, topk_idx, topk_weights, cumulative_local_expert_recv_stats, num_experts,
                              num_max_tokens_per_rank, expert_alignment, num_sms, previous_event,
                              async_with_compute_stream, allocate_on_comm_stream, handle, do_cpu_sync, do_expand,
                              do_zero_padding, use_tma_aligned_col_major_sf, defer_epilogue, copy_topk_idx=False)

    def _dispatch(self, x, topk_idx=None, topk_weights=None, stats=None, num_experts=None,
                  num_max_tokens_per_rank=None, expert_alignment=None, num_sms=0, previous_event=None,
                  async_mode=False, allocate_on_comm_stream=False, handle=None, do_cpu_sync=None, do_expand=False,
                  do_zero_padding=False, col_major_sf=False, defer_epilogue=False, copy_topk_idx=False,
                  packed_stride=0, on_received=None):
        """The one dispatch path behind every API generation (V2.5, V2.1 and the V1 facade).
        ``on_received(results)`` runs once the outputs are filled (in the epilogue, wherever it runs)."""
        engine, R = self._engine, self.num_ranks
        state = {}

        def check():
            _check_async_flags(previous_event, async_mode, allocate_on_comm_stream, defer_epilogue)
            if handle is not None and handle._owner is not self:
                raise V.fail("handle", "a handle this buffer made", "a handle of another buffer")
            a = check_dispatch(R, x, topk_idx, topk_weights, stats, num_experts,
                               num_max_tokens_per_rank if num_max_tokens_per_rank is not None or handle is not None
                               else self.num_max_tokens_per_rank, expert_alignment, handle, do_cpu_sync, do_expand,
                               do_zero_padding, col_major_sf)
            a.packed_stride = packed_stride
            engine.check_capacity(a)
            state["args"] = a
            state["plan"] = engine.plan(a) if handle is None else _replan(handle._plan)
            sf = a.sf
            return [1, a.hidden, a.x.element_size(), 0 if sf is None else sf.shape[1],
                    0 if sf is None else int(sf.dtype == torch.int32), a.num_topk, a.num_max_tokens_per_rank,
                    a.num_experts, a.expert_alignment, int(a.do_expand), int(a.topk_weights is not None),
                    int(handle is not None)]

        self._session.start("dispatch", _DISPATCH_SIGNATURE, check, counts=lambda: state["plan"].send_counts)
        a, plan = state["args"], state["plan"]
        session = self._session
        session.guard(lambda: engine.exchange_counts(a, plan))
        out = engine.allocate(a, plan)
        num_sms = num_sms or self.get_theoretical_num_sms(a.num_experts, a.num_topk)
        if handle is None:
            kept = a.topk_idx.clone() if copy_topk_idx else a.topk_idx
            handle = EPHandle(a.do_expand, a.num_experts, a.expert_alignment, a.num_max_tokens_per_rank,
                              align(num_sms, 2), kept, out.num_recv_tokens, out.num_expanded_tokens,
                              out.aligned_list, out.psum_per_rank, out.psum_per_expert,
                              out.true_per_expert if a.do_expand else out.true_per_expert.clone(),
                              out.recv_src_metadata, _dst_buffer_slot_idx(a.topk_idx, plan), None, None)
            handle._owner = self
            handle._plan = plan
        else:
            handle._plan = plan  # identical routing; refreshed receive bounds

        recv_x = (out.recv_x, out.recv_sf) if out.recv_sf is not None else out.recv_x
        results = (recv_x, out.recv_topk_idx, out.recv_topk_weights, handle)

        def send():
            if previous_event is not None:
                previous_event.current_stream_wait()
            engine.send(a, plan)

        def epilogue():
            engine.receive(a, plan, out)
            if on_received is not None:
                on_received(results)
            return results

        return self._issue(send, epilogue, async_mode, defer_epilogue, results)

    def _issue(self, send, epilogue, async_mode: bool, defer_epilogue: bool, results: tuple):
        session = self._session
        if defer_epilogue:
            session.guard(send)
            deferred = session.defer(epilogue)
            event = EventOverlap(EventHandle())
            event.register_hook_after_wait(deferred.run)
            event.outputs = results  # allocated already, filled by the epilogue (V1 hook mode needs them)
            return event
        if async_mode:
            if session.transport_kind == "shm":
                future = session.submit(lambda: (send(), epilogue()))
            else:  # collectives stay on the caller's thread so every rank issues them in one order
                session.guard(send)
                future = session.submit(epilogue)
            return (*results, EventOverlap(EventHandle(future=future)))
        session.guard(send)
        session.guard(epilogue)
        return (*results, EventOverlap())

    # ---- combine -----------------------------------------------------------------------------
    def combine(self, x: torch.Tensor, handle: EPHandle, topk_weights: torch.Tensor | None = None,
                bias: Union[torch.Tensor, Sequence[torch.Tensor], None] = None, num_sms: int = 0, num_qps: int = 0,
                previous_event: EventHandle | None = None, async_with_compute_stream: bool = False,
                allocate_on_comm_stream: bool = False, defer_epilogue: bool = False):
        """Sum every rank's rows of each token back at its source (plus ``bias``): returns
        ``(combined_x, combined_topk_weights, event)``, or the ``EventOverlap`` with ``defer_epilogue``."""
        self._check_alive()
        return self._combine(x, handle, topk_weights, bias, previous_event, async_with_compute_stream,
                             allocate_on_comm_stream, defer_epilogue)

    def _combine(self, x, handle, topk_weights, bias, previous_event, async_mode, allocate_on_comm_stream,
                 defer_epilogue, sum_weights=False, multiple_reduction=None, slot_weights=None):
        engine, state = self._engine, {}
        multi = self.allow_multiple_reduction if multiple_reduction is None else multiple_reduction

        def check():
            _check_async_flags(previous_event, async_mode, allocate_on_comm_stream, defer_epilogue)
            if isinstance(handle, EPHandle) and handle._owner is not self:
                raise V.fail("handle", "a handle this buffer made", "a handle of another buffer")
            c = check_combine(x, handle, topk_weights, bias, multi)
            engine.check_combine_capacity(handle, multi)
            state["args"] = c
            return [2, handle._plan.hidden, handle.num_topk, handle.num_max_tokens_per_rank, handle.num_experts,
                    int(handle.do_expand), int(topk_weights is not None)]

        self._session.start("combine", _COMBINE_SIGNATURE, check)
        c = state["args"]
        holder = {}

        def send():
            if previous_event is not None:
                previous_event.current_stream_wait()
            engine.combine_send(c, multi)

        def epilogue(out=None):
            holder["out"] = engine.combine_reduce(c, sum_weights, slot_weights, out)
            return holder["out"]

        if defer_epilogue:
            return self._issue(send, epilogue, async_mode, True, ())
        if async_mode:
            # Hand out the output now (from the engine's arena or pool, like a synchronous one) and let
            # the epilogue write into it; the weights are small and copied at the end.
            T = handle._topk_idx.shape[0]
            combined = engine.combine_output(T, handle._plan.hidden, handle._topk_idx.device)
            weights = torch.empty(T, handle.num_topk, dtype=torch.float32) if topk_weights is not None else None

            def fill():
                _, w = epilogue(combined)
                if weights is not None:
                    weights.copy_(w)

            self._issue(send, fill, True, False, ())
            return combined, weights, EventOverlap(EventHandle(future=self._session._pending[-1]))
        self._issue(send, epilogue, False, False, ())
        return (*holder["out"], EventOverlap())


    # ---- redundant-expert load balancing (see buffers/lb.py) ---------------------------------------
    def lb_get_theoretical_num_sms(self) -> int:
        return self.get_theoretical_num_sms(0, 0)

    def lb_prefetch_weights(self, redundant_expert_weights, expert_weights, redundancy_mapping: torch.Tensor,
                            num_sms: int = 0, previous_event: EventHandle | None = None) -> EventOverlap:
        from .lb import lb_prefetch_weights
        return lb_prefetch_weights(self, redundant_expert_weights, expert_weights, redundancy_mapping, num_sms,
                                   previous_event)

    def lb_reduce_grads(self, redundant_expert_grads: torch.Tensor, expert_grads: torch.Tensor,
                        redundancy_mapping: torch.Tensor, num_sms: int = 0,
                        previous_event: EventHandle | None = None) -> EventOverlap:
        from .lb import lb_reduce_grads
        return lb_reduce_grads(self, redundant_expert_grads, expert_grads, redundancy_mapping, num_sms,
                               previous_event)


def _check_async_flags(previous_event, async_mode, allocate_on_comm_stream, defer_epilogue):
    if previous_event is not None and not allocate_on_comm_stream:
        raise V.fail("previous_event", "None unless allocate_on_comm_stream=True", "an event")
    if defer_epilogue and not async_mode:
        raise V.fail("defer_epilogue", "False unless async_with_compute_stream=True", repr(defer_epilogue))
    if previous_event is not None and not isinstance(previous_event, EventHandle):
        raise V.fail("previous_event", "an EventHandle", type(previous_event).__name__, TypeError)


def _replan(plan):
    """A cached dispatch reuses the routing; receive-side fields are recomputed by the exchange."""
    from dataclasses import replace
    return replace(plan, recv_counts=None, row_start=None, expert_base=None, num_rows=0, num_expanded=0)


def _dst_buffer_slot_idx(topk_idx: torch.Tensor, plan) -> torch.Tensor:
    """[T, K] int32: the slot each sent copy of (token, top-k slot) landed in at its rank (-1 if unused)."""
    ranks = torch.where(topk_idx >= 0, topk_idx // plan.num_local_experts, 0)
    slots = torch.gather(plan.dst_slot, 1, ranks)
    return torch.where(topk_idx >= 0, slots, -1).int()


def _check_same_shape_on_every_rank(group, num_max_tokens_per_rank: int, hidden: int) -> None:
    """One small all-gather at construction: ranks sized differently would otherwise meet at the
    first dispatch, after the buffer seemed fine. Every rank raises the same error."""
    mine = (int(num_max_tokens_per_rank), int(hidden))
    shapes: list = [None] * group.size()
    dist.all_gather_object(shapes, mine, group=group)
    differing = [r for r, s in enumerate(shapes) if s != shapes[0]]
    if differing:
        ranks = ", ".join(f"rank {r}: {shapes[r]}" for r in [0, *differing])
        raise ValueError(f"EPBuffer: every rank must pass the same (num_max_tokens_per_rank, hidden); got {ranks}")
