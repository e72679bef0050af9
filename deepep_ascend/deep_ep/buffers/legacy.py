"""The V1 ``Buffer`` facade (normal and low-latency kernels) on the EPBuffer engine.

Mapping: V1 normal dispatch is a token-major dispatch (rows by source rank, then token); without
top-k inputs the routing comes from ``is_token_in_rank`` alone. Low-latency dispatch is an
expanded dispatch without CPU sync, repacked into ``[num_local_experts, R * M, hidden]``; its
combine sends every (token, expert) row back and applies the router weights at the source.
The token capacity of normal dispatches is whatever the buffer's bytes hold for the call's shape.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from deepjit import validation as V

from .. import _dispatch
from ..engine import layout, low_latency
from ..engine.handle import EPHandle
from ..utils.event import EventHandle, EventOverlap
from ..utils.math import align
from .ep import EPBuffer

_LL_MAX_TOPK = 11
_V1_TABLE = (2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160)


class Config:
    """Per-channel chunk sizes of the upstream ring kernels; kept for API parity and validated."""

    def __init__(self, num_sms: int = 20, num_max_nvl_chunked_send_tokens: int = 6,
                 num_max_nvl_chunked_recv_tokens: int = 256, num_max_rdma_chunked_send_tokens: int = 6,
                 num_max_rdma_chunked_recv_tokens: int = 256):
        if num_sms % 2:
            raise ValueError(f"Config.num_sms must be even, got {num_sms}")
        if num_max_nvl_chunked_send_tokens >= num_max_nvl_chunked_recv_tokens:
            raise ValueError("Config: NVL send chunk must be smaller than the NVL receive chunk")
        self.num_sms = num_sms
        self.num_max_nvl_chunked_send_tokens = num_max_nvl_chunked_send_tokens
        self.num_max_nvl_chunked_recv_tokens = num_max_nvl_chunked_recv_tokens
        self.num_max_rdma_chunked_send_tokens = num_max_rdma_chunked_send_tokens
        self.num_max_rdma_chunked_recv_tokens = num_max_rdma_chunked_recv_tokens

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """Bytes for 4096 tokens per rank of ``hidden_bytes`` (this engine's slot layout, 32 top-k)."""
        return layout.buffer_size_hint(num_ranks, 4096, max(hidden_bytes // 2, 1), 32, False)

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        return 0


class LowLatencyHandle(tuple):
    """Upstream's LL handle tuple ``(packed_recv_src_info, packed_recv_layout_range,
    num_max_dispatch_tokens_per_rank, hidden, num_experts)`` plus the engine handle."""

    ep_handle: EPHandle


class Buffer:
    num_sms = 20

    def __init__(self, group: dist.ProcessGroup | None = None, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0,
                 low_latency_mode: bool = False, num_qps_per_rank: int = 24,
                 allow_nvlink_for_low_latency_mode: bool = True, allow_mnnvl: bool = False,
                 explicitly_destroy: bool = False, enable_shrink: bool = False, comm=None):
        if group is None and comm is None:
            raise ValueError("Buffer needs a torch.distributed group (mpi4py comm is not supported here)")
        group = group if group is not None else dist.group.WORLD
        for name, value in (("num_nvl_bytes", num_nvl_bytes), ("num_rdma_bytes", num_rdma_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value % 128:
                raise ValueError(f"{name} must be a non-negative multiple of 128, got {value!r}")
        if num_nvl_bytes + num_rdma_bytes == 0:
            raise ValueError("Buffer needs num_nvl_bytes or num_rdma_bytes > 0")
        self.group = group
        self.rank = group.rank()
        self.group_size = group.size()
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.explicitly_destroy = explicitly_destroy
        # Low-latency buffers have no use for the direct-write output arena of normal dispatches.
        self._ep = EPBuffer(group, num_bytes=max(num_nvl_bytes, num_rdma_bytes), explicitly_destroy=True,
                            _output_arena=not low_latency_mode)
        self.runtime = self._ep.runtime
        self._zero_copy: torch.Tensor | None = None
        self._private_bytes: torch.Tensor | None = None  # get_local_buffer_tensor without shared memory
        session = self._ep._session
        self._ll = None
        if low_latency_mode:
            self._ll = _dispatch.TABLE.run("low_latency", session.device, session, self._ep.num_bytes)
        self.enable_shrink = bool(enable_shrink)
        if enable_shrink:
            if self._ll is None:
                raise ValueError("enable_shrink needs low_latency_mode=True over shared memory (ranks of one host, "
                                 "host kernels)")
            self._ll.mask = torch.zeros(self.group_size, dtype=torch.int32)

    # ---- configuration -----------------------------------------------------------------------
    @classmethod
    def set_num_sms(cls, new_num_sms: int) -> None:
        if new_num_sms % 2:
            raise ValueError(f"num_sms must be even, got {new_num_sms}")
        cls.num_sms = new_num_sms

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        if num_ranks not in _V1_TABLE:
            raise ValueError(f"no dispatch config for {num_ranks} ranks; known: {_V1_TABLE}")
        return Config(Buffer.num_sms, 6, 256, 6, 128)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        if num_ranks not in _V1_TABLE:
            raise ValueError(f"no combine config for {num_ranks} ranks; known: {_V1_TABLE}")
        return Config(Buffer.num_sms, 4, 256, 6, 128)

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                                       num_experts: int) -> int:
        """Room for the low-latency kernels' two areas with up to 11 top-k slots (upstream's
        low-latency limit), and for the collective transports' slot layout."""
        areas = 2 * low_latency.area_bytes_hint(num_ranks, num_max_dispatch_tokens_per_rank, hidden, num_experts,
                                                _LL_MAX_TOPK)
        return max(align(areas, layout.ALLOCATION_ALIGNMENT),
                   layout.buffer_size_hint(num_ranks, num_max_dispatch_tokens_per_rank, hidden, 32, False, False))

    @staticmethod
    def is_sm90_compiled() -> bool:
        return False

    @staticmethod
    def capture() -> EventOverlap:
        return EventOverlap(EventHandle())

    def get_comm_stream(self):
        return self._ep.get_comm_stream()

    def get_local_buffer_tensor(self, dtype: torch.dtype, size=None, offset: int = 0,
                                use_rdma_buffer: bool = False) -> torch.Tensor:
        """A raw view of this rank's buffer bytes from ``offset`` (``size``: a shape or element
        count; default: the rest of the buffer). Over shared memory it is this rank's part of the
        window, which peers write into; with collective transports, bytes only this rank sees.
        The NVL and RDMA buffers are one region here, ``max(num_nvl_bytes, num_rdma_bytes)`` long."""
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
        itemsize = dtype.itemsize
        total = self._ep.num_bytes
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= total or offset % itemsize:
            raise ValueError(f"offset must be a multiple of {itemsize} in [0, {total}], got {offset!r}")
        shape = ((total - offset) // itemsize,) if size is None else \
            (tuple(size) if isinstance(size, (tuple, list, torch.Size)) else (size,))
        numel = 1
        for s in shape:
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise ValueError(f"size must be non-negative ints, got {size!r}")
            numel *= s
        if offset + numel * itemsize > total:
            raise ValueError(f"{numel} elements of {dtype} at offset {offset} exceed the buffer's {total} bytes")
        session = self._ep._session
        if session.transport_kind == "shm":
            return session.transport.region(self.rank, dtype, shape, offset)
        if self._private_bytes is None:
            self._private_bytes = torch.zeros(total, dtype=torch.uint8)
        return self._private_bytes[offset:offset + numel * itemsize].view(dtype).view(shape)

    def destroy(self) -> None:
        if not self.explicitly_destroy:
            raise RuntimeError("destroy() needs a Buffer created with explicitly_destroy=True")
        self._ep.destroy()

    # ---- normal kernels ----------------------------------------------------------------------
    def get_dispatch_layout(self, topk_idx: torch.Tensor, num_experts: int, previous_event=None,
                            async_finish: bool = False, allocate_on_comm_stream: bool = False):
        """Per rank / per expert token counts and the token-to-rank mask (a pure function of topk_idx)."""
        R = self.group_size
        if not isinstance(topk_idx, torch.Tensor) or topk_idx.dim() != 2 or topk_idx.dtype != torch.int64:
            raise TypeError(f"topk_idx must be a 2-D int64 tensor, got {getattr(topk_idx, 'dtype', type(topk_idx))}")
        if num_experts % R:
            raise ValueError(f"num_experts ({num_experts}) must be divisible by the number of ranks ({R})")
        valid = topk_idx >= 0
        rank_of = torch.where(valid, topk_idx // (num_experts // R), R)
        is_token_in_rank = torch.zeros(topk_idx.shape[0], R + 1, dtype=torch.bool)
        is_token_in_rank.scatter_(1, rank_of, True)
        is_token_in_rank = is_token_in_rank[:, :R].contiguous()
        num_tokens_per_rank = is_token_in_rank.sum(0).int()
        num_tokens_per_expert = torch.bincount(topk_idx[valid], minlength=num_experts).int()
        return num_tokens_per_rank, None, num_tokens_per_expert, is_token_in_rank, EventOverlap(EventHandle())

    def _capacity(self, hidden: int, elem: int, packs: int, num_topk: int) -> int:
        slot = layout.SlotLayout.of(hidden, elem, packs, num_topk)
        row = layout.RowLayout.of(hidden, num_topk)
        per_token = max(self.group_size * slot.slot_bytes, self.group_size * row.row_bytes)
        return (self._ep.num_bytes - layout.COUNTS_BYTES) // per_token

    def dispatch(self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None,
                 is_token_in_rank=None, num_tokens_per_expert=None, topk_idx=None, topk_weights=None,
                 expert_alignment: int = 1, num_worst_tokens: int = 0, config: Config | None = None,
                 previous_event=None, async_finish: bool = False, allocate_on_comm_stream: bool = False):
        """Returns ``(recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle, event)``."""
        prev = previous_event.event if isinstance(previous_event, EventOverlap) else previous_event
        if handle is not None:
            if topk_idx is not None or topk_weights is not None:
                raise ValueError("topk_idx and topk_weights must be None with a cached handle")
            ep_handle = handle
            recv_x, _, _, _, event = self._ep._dispatch(
                x, handle=ep_handle, previous_event=prev, async_mode=async_finish,
                allocate_on_comm_stream=prev is not None)
            return recv_x, None, None, None, handle, event
        if is_token_in_rank is None:
            raise ValueError("is_token_in_rank (from get_dispatch_layout) is required without a cached handle")
        if (topk_idx is None) != (topk_weights is None):
            raise ValueError("topk_idx and topk_weights must be given together or both omitted")
        x_data = x[0] if isinstance(x, tuple) else x
        T = x_data.shape[0]
        if not isinstance(is_token_in_rank, torch.Tensor) or tuple(is_token_in_rank.shape) != (T, self.group_size):
            raise ValueError(f"is_token_in_rank must have shape {(T, self.group_size)}, got "
                             f"{tuple(getattr(is_token_in_rank, 'shape', ()))}")
        if topk_idx is None:
            # Routing by rank only: one stand-in expert per rank.
            R = self.group_size
            routing = torch.where(is_token_in_rank, torch.arange(R).expand(T, R), -1).contiguous()
            num_experts = R
        else:
            routing = topk_idx
            if num_tokens_per_expert is None:
                raise ValueError("num_tokens_per_expert (from get_dispatch_layout) is required with topk_idx")
            num_experts = num_tokens_per_expert.shape[0]
        packs = x[1].shape[1] if isinstance(x, tuple) else 0
        capacity = self._capacity(x_data.shape[1], x_data.element_size(), packs, routing.shape[1])
        recv_x, recv_idx, recv_w, ep_handle, event = self._ep._dispatch(
            x, routing, topk_weights, num_experts=num_experts, num_max_tokens_per_rank=capacity,
            expert_alignment=expert_alignment, previous_event=prev, async_mode=async_finish,
            allocate_on_comm_stream=prev is not None, do_cpu_sync=num_worst_tokens == 0, copy_topk_idx=True)
        counts = ep_handle.num_recv_tokens_per_expert_list
        if num_worst_tokens:
            recv_x, recv_idx, recv_w = _first_rows((recv_x, recv_idx, recv_w), num_worst_tokens)
            counts = []
        if topk_idx is None:
            recv_idx = recv_w = None
            counts = []
        return recv_x, recv_idx, recv_w, counts, ep_handle, event

    def combine(self, x: torch.Tensor, handle: EPHandle, topk_weights: torch.Tensor | None = None, bias=None,
                config: Config | None = None, previous_event=None, async_finish: bool = False,
                allocate_on_comm_stream: bool = False):
        """Plain sum over the ranks that received each token (+ biases); weights are summed too."""
        prev = previous_event.event if isinstance(previous_event, EventOverlap) else previous_event
        combined, weights, event = self._ep._combine(x, handle, topk_weights, bias, prev, async_finish,
                                                     allocate_on_comm_stream or prev is not None, False,
                                                     sum_weights=True)
        return combined, weights, event

    # ---- low-latency kernels -----------------------------------------------------------------
    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        """Nothing to clean: every operation's handshake already separates it from the previous one."""

    # ---- shrink / fault masks (enable_shrink=True) --------------------------------------------
    def _shrink_mask(self) -> torch.Tensor:
        if not self.enable_shrink:
            raise ValueError("the low-latency mask needs a Buffer created with enable_shrink=True")
        return self._ll.mask

    def low_latency_update_mask_buffer(self, rank: int, mask: bool = False) -> None:
        """Mask (``mask=True``) or unmask a rank for this rank's low-latency kernels: masked ranks
        are neither sent to nor waited for, and their experts add nothing to combined tokens.
        Ranks that time out or die inside a low-latency kernel are masked automatically."""
        table = self._shrink_mask()
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.group_size:
            raise ValueError(f"rank must be in [0, {self.group_size}), got {rank!r}")
        if rank == self.rank and mask:
            raise ValueError("a rank cannot mask itself")
        table[rank] = int(bool(mask))

    def low_latency_query_mask_buffer(self, mask_status: torch.Tensor) -> None:
        """Writes the mask into ``mask_status`` ([num_ranks] int32; 1 = masked)."""
        table = self._shrink_mask()
        if not isinstance(mask_status, torch.Tensor) or mask_status.dtype != torch.int32 \
                or tuple(mask_status.shape) != (self.group_size,):
            raise ValueError(f"mask_status must be an int32 tensor of shape ({self.group_size},), got "
                             f"{getattr(mask_status, 'dtype', type(mask_status))} "
                             f"{tuple(getattr(mask_status, 'shape', ()))}")
        mask_status.copy_(table)

    def low_latency_clean_mask_buffer(self) -> None:
        self._shrink_mask().zero_()

    def low_latency_dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, num_max_dispatch_tokens_per_rank: int,
                             num_experts: int, cumulative_local_expert_recv_stats: torch.Tensor | None = None,
                             dispatch_wait_recv_cost_stats: torch.Tensor | None = None, use_fp8: bool = True,
                             round_scale: bool = False, use_ue8m0: bool = False, async_finish: bool = False,
                             return_recv_hook: bool = False):
        """Returns ``(recv_x, recv_count, handle, event, hook)`` with ``recv_x`` packed per local expert."""
        if not self.low_latency_mode:
            raise ValueError("low_latency_dispatch needs a Buffer created with low_latency_mode=True")
        if async_finish and return_recv_hook:
            raise ValueError("async_finish and return_recv_hook cannot both be set")
        if use_ue8m0 and not round_scale:
            raise ValueError("use_ue8m0=True requires round_scale=True")
        if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16 or x.dim() != 2:
            raise TypeError(f"x must be a 2-D BF16 tensor, got {getattr(x, 'dtype', type(x))}")
        R, M, H = self.group_size, num_max_dispatch_tokens_per_rank, x.shape[1]
        if self._ll is not None:
            return self._ll_dispatch(x, topk_idx, M, num_experts, cumulative_local_expert_recv_stats, use_fp8,
                                     round_scale, use_ue8m0, async_finish, return_recv_hook)
        payload = x
        if use_fp8:
            fp8, scales = _cast_to_fp8(x, round_scale, self._ep)
            if use_ue8m0:
                exps = ((scales.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
                pad = (-exps.shape[1]) % 4
                exps = torch.cat([exps, exps.new_zeros(exps.shape[0], pad)], 1) if pad else exps
                scales = exps.contiguous().view(torch.int32)
            payload = (fp8, scales)
        deferred = return_recv_hook
        e_local = num_experts // R
        out = self._ep._dispatch(payload, topk_idx, None, cumulative_local_expert_recv_stats, num_experts, M, 1,
                                 async_mode=async_finish or deferred, do_cpu_sync=False, do_expand=True,
                                 defer_epilogue=deferred, copy_topk_idx=True, packed_stride=R * M)
        src_info = torch.full((e_local, R * M), -1, dtype=torch.int32)
        layout_range = torch.zeros(e_local, R, dtype=torch.int64)
        recv_count = torch.zeros(e_local, dtype=torch.int32)
        handle = LowLatencyHandle((src_info, layout_range, M, H, num_experts))

        def packed(recv):
            # Expanded rows are already packed: expert e's rows start at e * R * M, by source rank then token.
            if isinstance(recv, tuple):
                return recv[0].view(e_local, R * M, H), recv[1].view(e_local, R * M, -1)
            return recv.view(e_local, R * M, H)

        def finish(results):
            ep_handle = results[3]
            meta = ep_handle.recv_src_metadata[: ep_handle._plan.num_rows]
            rows = meta[:, 2:].long()
            has = rows >= 0
            src = meta[:, 0].long().unsqueeze(1).expand_as(rows)[has]
            src_info.view(-1)[rows[has]] = (src % M).int()
            per_src = ep_handle._plan.recv_counts[:, 1:].t().long()  # [local expert, source rank] tokens
            layout_range.copy_(((torch.cumsum(per_src, 1) - per_src) << 32) | per_src)
            recv_count.copy_(ep_handle.num_unaligned_recv_tokens_per_expert)
            handle.ep_handle = ep_handle

        if deferred:
            event = out
            return packed(event.outputs[0]), recv_count, handle, EventOverlap(), lambda: finish(event.wait())
        *results, event = out
        if async_finish:
            event.event.current_stream_wait()
        finish(results)
        return packed(results[0]), recv_count, handle, event if async_finish else EventOverlap(), None

    def _ll_dispatch(self, x, topk_idx, M, num_experts, stats, use_fp8, round_scale, use_ue8m0, async_finish,
                     hook_mode):
        """Shared memory: one kernel call (two in hook mode: send now, receive in the hook; with
        async_finish the receive half runs on the comm worker)."""
        session = self._ep._session
        recv, recv_count, src_info, layout_range, state, finish = self._ll.dispatch(
            x, topk_idx, M, num_experts, stats, use_fp8, round_scale, use_ue8m0, split=hook_mode or async_finish)
        handle = LowLatencyHandle((src_info, layout_range, M, x.shape[1], num_experts))
        handle.ep_handle = None
        handle.ll_state = state
        if hook_mode:
            deferred = session.defer(finish)
            return recv, recv_count, handle, EventOverlap(), deferred.run
        if async_finish:
            return recv, recv_count, handle, EventOverlap(EventHandle(future=session.submit(finish))), None
        return recv, recv_count, handle, EventOverlap(), None

    def get_next_low_latency_combine_buffer(self, handle: LowLatencyHandle) -> torch.Tensor:
        """A BF16 ``[E_local, R*M, hidden]`` tensor the caller may write expert outputs into, then
        call ``low_latency_combine(..., zero_copy=True)``."""
        _, _, M, H, num_experts = handle
        shape = (num_experts // self.group_size, self.group_size * M, H)
        if self._zero_copy is None or tuple(self._zero_copy.shape) != shape:
            self._zero_copy = torch.empty(shape, dtype=torch.bfloat16)
        return self._zero_copy

    def low_latency_combine(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                            handle: LowLatencyHandle, use_logfmt: bool = False, zero_copy: bool = False,
                            async_finish: bool = False, return_recv_hook: bool = False,
                            out: torch.Tensor | None = None, combine_wait_recv_cost_stats=None):
        """Weighted: ``out[t] = sum_k topk_weights[t, k] * y_{topk_idx[t, k]}(t)``. Returns ``(combined_x, event, hook)``.

        ``use_logfmt`` selects upstream's lossy 10-bit wire format; over shared memory the rows
        travel as BF16 whatever it says (the result is the exact BF16 combine)."""
        if zero_copy:
            x = self._zero_copy
        if isinstance(out, torch.Tensor):
            V.output("out", out, ("x", x), ("topk_idx", topk_idx), ("topk_weights", topk_weights))
        state = getattr(handle, "ll_state", None)
        if isinstance(handle, LowLatencyHandle) and state is not None and self._ll is not None:
            _, _, M, H, num_experts = handle
            session = self._ep._session
            run = None
            if async_finish:
                def run(call):
                    return EventOverlap(EventHandle(future=session.submit(call)))
            combined, event = self._ll.combine(x, topk_idx, topk_weights, state, M, H, num_experts, out, run)
            return combined, event or EventOverlap(), (lambda: None) if return_recv_hook else None
        if not isinstance(handle, LowLatencyHandle) or getattr(handle, "ep_handle", None) is None:
            raise ValueError("handle must come from low_latency_dispatch (call its hook first in hook mode)")
        ep_handle = handle.ep_handle
        e_local, RM, H = x.shape
        if not isinstance(topk_weights, torch.Tensor) or topk_weights.dtype != torch.float32 \
                or tuple(topk_weights.shape) != tuple(topk_idx.shape):
            raise ValueError(f"topk_weights must be float32 of shape {tuple(topk_idx.shape)}")
        expanded = x.reshape(e_local * RM, H)  # the packed layout is the expanded layout
        combined, _, event = self._ep._combine(expanded, ep_handle, None, None, None, async_finish, False, False,
                                               multiple_reduction=False, slot_weights=topk_weights.contiguous())
        if out is not None:
            if async_finish:
                event.event.current_stream_wait()
            out.copy_(combined)
            combined = out
        return combined, event, (lambda: None) if return_recv_hook else None


def _first_rows(tensors, n):
    out = []
    for t in tensors:
        if isinstance(t, tuple):
            out.append(tuple(_pad_rows(u, n) for u in t))
        else:
            out.append(None if t is None else _pad_rows(t, n))
    return out


def _pad_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    if t.shape[0] >= n:
        return t[:n]
    fill = -1 if t.dtype == torch.int64 else 0
    extra = torch.full((n - t.shape[0], *t.shape[1:]), fill, dtype=t.dtype) if t.element_size() != 1 else \
        torch.zeros(n - t.shape[0], *t.shape[1:], dtype=torch.uint8).view(t.dtype)
    return torch.cat([t, extra])


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    t = t.reshape(-1, t.shape[-1])
    return t.view(torch.uint8) if t.element_size() == 1 else t



def _cast_to_fp8(x: torch.Tensor, round_scale: bool, ep) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference cast (utils/math.py); the host kernel on CPU, bit for bit."""
    return _dispatch.TABLE.run("per_token_cast_to_fp8", x.device, x, round_scale, ep._session.threads)
