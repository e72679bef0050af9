"""The V1 ``Buffer`` facade (normal and low-latency kernels) on the EPBuffer engine.

Mapping: V1 normal dispatch is a token-major dispatch (rows by source rank, then token); without
top-k inputs the routing comes from ``is_token_in_rank`` alone. Low-latency dispatch is an
expanded dispatch without CPU sync, repacked into ``[num_local_experts, R * M, hidden]``; its
combine sends every (token, expert) row back and applies the router weights at the source.
A normal dispatch larger than the buffer's bytes hold for the call's shape goes through it in
chunks (every rank the same number), its rows put back in upstream's order.
"""
from __future__ import annotations

import threading

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
            raise V.fail("num_sms", "an even number", num_sms)
        if num_max_nvl_chunked_send_tokens >= num_max_nvl_chunked_recv_tokens:
            raise V.fail("num_max_nvl_chunked_send_tokens", f"a value < num_max_nvl_chunked_recv_tokens "
                         f"({num_max_nvl_chunked_recv_tokens})", num_max_nvl_chunked_send_tokens)
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


class LegacyHandle(tuple):
    """Upstream's intranode handle ``(rank_prefix_matrix [R, R], channel_prefix_matrix [R, 1],
    recv_channel_prefix_matrix [R, 1], recv_src_idx [N], is_token_in_rank [T, R], send_head [T, R])``
    with one channel (the engine has none): ``rank_prefix_matrix[i, j]`` counts the tokens ranks
    ``0..i`` send to rank ``j``, ``channel_prefix_matrix`` the tokens this rank sends to each rank,
    ``recv_channel_prefix_matrix`` where each source's rows start, ``recv_src_idx`` each received
    row's token index at its source, ``send_head[t, j]`` token t's position among the tokens this
    rank sends to rank j (-1: not sent).

    Engine side: ``parts`` holds the EPHandle of each chunk the batch went in (one unless it
    exceeded the buffer), ``order`` (several chunks) where the chunk-major received rows go in
    the returned order, ``tokens`` the ``[source, destination]`` token counts."""

    @staticmethod
    def of(parts: list, cap: int, is_token_in_rank: torch.Tensor, rank: int, source_index) -> LegacyHandle:
        tokens = sum(p._plan.all_counts[:, :, 0].long() for p in parts)
        recv = tokens[:, rank]
        n = int(recv.sum())
        heads, before = [], torch.zeros_like(recv)
        for p in parts:
            slot = p._plan.dst_slot
            heads.append(torch.where(slot >= 0, slot + before.to(slot.device), -1).int())
            before = before + p._plan.send_tokens.long()
        src_idx = source_index.target(n) if source_index is not None else torch.empty(n, dtype=torch.int32)
        handle = LegacyHandle((torch.cumsum(tokens, 0).int(), tokens[rank][:, None].int(),
                               (torch.cumsum(recv, 0) - recv)[:, None].int(), src_idx, is_token_in_rank,
                               torch.cat(heads)))
        handle.parts, handle.cap, handle.tokens = parts, cap, tokens
        handle.num_received = handle.num_rows = n
        handle.order = None if len(parts) == 1 else _source_major(parts, tokens.shape[0])
        return handle

    def fill_source_index(self, parts: list) -> None:
        local = [p.recv_src_metadata[: p._plan.num_rows, 0] % self.cap + c * self.cap for c, p in enumerate(parts)]
        self[3].copy_(torch.cat(local)[self.order])


class _SourceIndex:
    """``recv_src_idx`` of a one-chunk dispatch, filled when its epilogue has run (which, for an
    asynchronous dispatch, may be before or after the handle is made)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._tensor = None

    def __call__(self, results) -> None:
        h = results[3]
        values = (h.recv_src_metadata[: h._plan.num_rows, 0] % h.num_max_tokens_per_rank).int()
        with self._lock:
            if self._tensor is None:
                self._tensor = values
            else:
                self._tensor.copy_(values)

    def target(self, n: int) -> torch.Tensor:
        with self._lock:
            if self._tensor is None:
                self._tensor = torch.empty(n, dtype=torch.int32)
            return self._tensor


def _source_major(parts: list, num_ranks: int) -> torch.Tensor:
    """Chunk-major received rows (chunk, then source) -> by source, then chunk (= token order)."""
    order, base = [], 0
    starts = []
    for p in parts:
        starts.append((base, p._plan.row_start.long()))
        base += p._plan.num_rows
    for s in range(num_ranks):
        for first, row_start in starts:
            order.append(torch.arange(first + int(row_start[s]), first + int(row_start[s + 1])))
    return torch.cat(order)


def _gather_rows(chunks: list, order: torch.Tensor):
    if chunks[0] is None:
        return None
    if isinstance(chunks[0], tuple):
        return tuple(_gather_rows([c[i] for c in chunks], order) for i in range(len(chunks[0])))
    return torch.cat(chunks)[order.to(chunks[0].device)]


class Buffer:
    num_sms = 20

    def __init__(self, group: dist.ProcessGroup | None = None, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0,
                 low_latency_mode: bool = False, num_qps_per_rank: int = 24,
                 allow_nvlink_for_low_latency_mode: bool = True, allow_mnnvl: bool = False,
                 explicitly_destroy: bool = False, enable_shrink: bool = False, comm=None):
        if group is None and comm is None:
            raise V.fail("group", "a torch.distributed group (mpi4py comm is not supported here)", None)
        group = group if group is not None else dist.group.WORLD
        for name, value in (("num_nvl_bytes", num_nvl_bytes), ("num_rdma_bytes", num_rdma_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value % 128:
                raise V.fail(name, "a non-negative multiple of 128", repr(value))
        if num_nvl_bytes + num_rdma_bytes == 0:
            raise V.fail("num_nvl_bytes", "a value > 0, or num_rdma_bytes > 0", "0 with num_rdma_bytes 0")
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
                raise V.fail("enable_shrink", "False unless low_latency_mode=True over shared memory (ranks of one "
                             "host, host kernels)", f"True with low_latency_mode={low_latency_mode!r}")
            self._ll.mask = torch.zeros(self.group_size, dtype=torch.int32)

    # ---- configuration -----------------------------------------------------------------------
    @classmethod
    def set_num_sms(cls, new_num_sms: int) -> None:
        if new_num_sms % 2:
            raise V.fail("new_num_sms", "an even number", new_num_sms)
        cls.num_sms = new_num_sms

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        if num_ranks not in _V1_TABLE:
            raise V.fail("num_ranks", f"one of {_V1_TABLE} (the ranks with a dispatch config)", num_ranks)
        return Config(Buffer.num_sms, 6, 256, 6, 128)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        if num_ranks not in _V1_TABLE:
            raise V.fail("num_ranks", f"one of {_V1_TABLE} (the ranks with a combine config)", num_ranks)
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
        """Upstream: whether the build has its SM90 features, which its tests read as "FP8 dispatch
        is available". Every backend here dispatches FP8 (E4M3 rows with FP32 or UE8M0 scales)."""
        return True

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
            raise V.fail("dtype", "a torch.dtype", type(dtype).__name__, TypeError)
        itemsize = dtype.itemsize
        total = self._ep.num_bytes
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= total or offset % itemsize:
            raise V.fail("offset", f"a multiple of {itemsize} in [0, {total}]", repr(offset))
        shape = ((total - offset) // itemsize,) if size is None else \
            (tuple(size) if isinstance(size, (tuple, list, torch.Size)) else (size,))
        numel = 1
        for s in shape:
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise V.fail("size", "non-negative ints", repr(size))
            numel *= s
        if offset + numel * itemsize > total:
            raise V.fail("size", f"at most the buffer's {total} bytes from offset {offset}",
                         f"{numel} elements of {dtype}")
        session = self._ep._session
        if session.transport_kind == "shm":
            return session.transport.region(self.rank, dtype, shape, offset)
        if self._private_bytes is None:
            self._private_bytes = torch.zeros(total, dtype=torch.uint8)
        return self._private_bytes[offset:offset + numel * itemsize].view(dtype).view(shape)

    def destroy(self) -> None:
        if not self.explicitly_destroy:
            raise RuntimeError("destroy() needs a Buffer created with explicitly_destroy=True")
        if self._ll is not None and hasattr(self._ll, "destroy"):
            self._ll.destroy()
        self._ep.destroy()

    # ---- normal kernels ----------------------------------------------------------------------
    def get_dispatch_layout(self, topk_idx: torch.Tensor, num_experts: int, previous_event=None,
                            async_finish: bool = False, allocate_on_comm_stream: bool = False):
        """Per rank / per expert token counts and the token-to-rank mask (a pure function of topk_idx)."""
        R = self.group_size
        if not isinstance(topk_idx, torch.Tensor) or topk_idx.dim() != 2 or topk_idx.dtype != torch.int64:
            raise V.fail("topk_idx", "a 2-D int64 tensor", f"{getattr(topk_idx, 'dtype', type(topk_idx))} "
                         f"{tuple(getattr(topk_idx, 'shape', ()))}", TypeError)
        if num_experts % R:
            raise V.fail("num_experts", f"a multiple of the number of ranks ({R})", num_experts)
        valid = topk_idx >= 0
        rank_of = torch.where(valid, topk_idx // (num_experts // R), R)
        is_token_in_rank = torch.zeros(topk_idx.shape[0], R + 1, dtype=torch.bool, device=topk_idx.device)
        is_token_in_rank.scatter_(1, rank_of, True)
        is_token_in_rank = is_token_in_rank[:, :R].contiguous()
        num_tokens_per_rank = is_token_in_rank.sum(0).int()
        num_tokens_per_expert = torch.bincount(topk_idx[valid], minlength=num_experts).int()
        return num_tokens_per_rank, None, num_tokens_per_expert, is_token_in_rank, EventOverlap(EventHandle())

    def _capacity(self, hidden: int, elem: int, packs: int, num_topk: int) -> int:
        """Tokens per rank one pass through the buffer holds for this shape (larger batches are
        dispatched in chunks of this many tokens)."""
        slot = layout.SlotLayout.of(hidden, elem, packs, num_topk)
        row = layout.RowLayout.of(hidden, num_topk)
        per_token = max(self.group_size * slot.slot_bytes, self.group_size * row.row_bytes)
        capacity = (self._ep.num_bytes - layout.COUNTS_BYTES) // per_token
        if capacity < 1:
            raise ValueError(f"the buffer ({self._ep.num_bytes} bytes) cannot hold one token of hidden {hidden} "
                             f"x {elem} bytes for {self.group_size} ranks; size it with Config.get_nvl_buffer_size_hint")
        return capacity

    def dispatch(self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None,
                 is_token_in_rank=None, num_tokens_per_expert=None, topk_idx=None, topk_weights=None,
                 expert_alignment: int = 1, num_worst_tokens: int = 0, config: Config | None = None,
                 previous_event=None, async_finish: bool = False, allocate_on_comm_stream: bool = False):
        """Returns ``(recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle, event)``;
        a cached dispatch (``handle`` given) returns ``(recv_x, None, None, None, None, event)``."""
        prev = previous_event.event if isinstance(previous_event, EventOverlap) else previous_event
        if handle is not None:
            if topk_idx is not None or topk_weights is not None:
                name = "topk_idx" if topk_idx is not None else "topk_weights"
                raise V.fail(name, "None with a cached handle", "a tensor")
            if not isinstance(handle, LegacyHandle):
                raise V.fail("handle", "the handle a non-cached dispatch returned", type(handle).__name__, TypeError)
            recv_x, _, _, event = self._dispatch_parts(x, None, None, None, handle.cap, None, expert_alignment,
                                                       prev, async_finish, handle.parts, handle)
            (recv_x,), event = _first_rows([recv_x], handle.num_rows, event, self._ep._session)
            return recv_x, None, None, None, None, event
        if is_token_in_rank is None or num_tokens_per_expert is None:
            name = "is_token_in_rank" if is_token_in_rank is None else "num_tokens_per_expert"
            raise V.fail(name, "a tensor from get_dispatch_layout without a cached handle", None)
        if (topk_idx is None) != (topk_weights is None):
            name, other = ("topk_weights", "topk_idx") if topk_weights is None else ("topk_idx", "topk_weights")
            raise V.fail(name, f"a tensor with {other} (both given or both omitted)", None)
        x_data = x[0] if isinstance(x, tuple) else x
        R = self.group_size
        T = x_data.shape[0]
        if not isinstance(is_token_in_rank, torch.Tensor) or tuple(is_token_in_rank.shape) != (T, R):
            raise V.fail("is_token_in_rank", f"shape {(T, R)}", tuple(getattr(is_token_in_rank, 'shape', ())))
        if not isinstance(num_tokens_per_expert, torch.Tensor) or num_tokens_per_expert.dim() != 1 \
                or num_tokens_per_expert.shape[0] % R or num_tokens_per_expert.dtype not in (torch.int32, torch.int64):
            raise V.fail("num_tokens_per_expert", f"a 1-D int tensor of num_experts (a multiple of {R}) counts",
                         f"{getattr(num_tokens_per_expert, 'dtype', type(num_tokens_per_expert))} "
                         f"{tuple(getattr(num_tokens_per_expert, 'shape', ()))}")
        if isinstance(num_worst_tokens, bool) or not isinstance(num_worst_tokens, int) or num_worst_tokens < 0:
            raise V.fail("num_worst_tokens", "a non-negative int", repr(num_worst_tokens))
        num_experts = num_tokens_per_expert.shape[0]
        per_expert = None
        if topk_idx is None:
            # Routing by rank only: one stand-in expert per rank; the per-expert counts come from
            # the senders' num_tokens_per_expert, as upstream's layout notification does.
            routing = torch.where(is_token_in_rank, torch.arange(R, device=x_data.device).expand(T, R), -1)
            routing, routed_experts = routing.contiguous(), R
            per_expert = self._received_per_expert(num_tokens_per_expert)
        else:
            routing, routed_experts = topk_idx, num_experts
        packs = x[1].shape[1] if isinstance(x, tuple) else 0
        cap = self._capacity(x_data.shape[1], x_data.element_size(), packs, routing.shape[1])
        recv_x, recv_idx, recv_w, event, handle = self._dispatch_parts(
            x, routing, topk_weights, routed_experts, cap, is_token_in_rank, expert_alignment, prev, async_finish)
        rows = handle.num_rows
        if num_worst_tokens:
            received = handle.tokens.sum(0)           # per destination rank
            worst = int(received.max())
            if worst > num_worst_tokens:
                raise V.fail("num_worst_tokens", f"at least the {worst} tokens rank {int(received.argmax())} receives",
                             num_worst_tokens)
            rows = num_worst_tokens
            counts = []
        else:
            if per_expert is None:
                per_expert = sum(p.num_unaligned_recv_tokens_per_expert.long() for p in handle.parts)
            al = expert_alignment
            counts = ((per_expert + al - 1) // al * al).tolist()
        handle.num_rows = rows
        (recv_x, recv_idx, recv_w), event = _first_rows((recv_x, recv_idx, recv_w), rows, event, self._ep._session)
        if topk_idx is None:
            recv_idx = recv_w = None
        return recv_x, recv_idx, recv_w, counts, handle, event

    def _received_per_expert(self, num_tokens_per_expert: torch.Tensor) -> torch.Tensor:
        """[E_local] tokens this rank's experts receive, summed over the senders' counts."""
        R = self.group_size
        send = num_tokens_per_expert.long().view(R, -1).contiguous()
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        return recv.sum(0).cpu()

    def _num_chunks(self, num_tokens: int, cap: int, device) -> int:
        """Every rank takes part in every chunk: the count follows the largest batch."""
        most = torch.tensor([num_tokens], dtype=torch.int64, device=device)
        dist.all_reduce(most, op=dist.ReduceOp.MAX, group=self.group)
        return max(1, -(-int(most) // cap))

    def _dispatch_parts(self, x, routing, weights, num_experts, cap, is_token_in_rank, expert_alignment, prev,
                        async_finish, cached=None, cached_handle=None):
        """Dispatches ``cap`` tokens per rank at a time (the buffer's room), every rank the same
        number of times, and puts the received rows back in upstream's order (by source rank,
        then token). Returns ``(recv_x, recv_topk_idx, recv_topk_weights, event)`` plus, when not
        cached, the new handle."""
        x_data = x[0] if isinstance(x, tuple) else x
        T = x_data.shape[0]
        n = len(cached) if cached is not None else self._num_chunks(T, cap, x_data.device)
        single = n == 1
        parts, outs, fill = [], [], None
        for c in range(n):
            rows = slice(min(c * cap, T), min((c + 1) * cap, T))
            xc = (x[0][rows], x[1][rows]) if isinstance(x, tuple) else x[rows]
            kwargs = dict(previous_event=prev if c == 0 else None, async_mode=async_finish and single,
                          allocate_on_comm_stream=prev is not None)
            if cached is not None:
                *out, event = self._ep._dispatch(xc, handle=cached[c], **kwargs)
                if single:
                    return out[0], None, None, event
            else:
                if single:
                    fill = _SourceIndex()
                    kwargs["on_received"] = fill
                *out, event = self._ep._dispatch(xc, routing[rows], None if weights is None else weights[rows],
                                                 num_experts=num_experts, num_max_tokens_per_rank=cap,
                                                 expert_alignment=expert_alignment, do_cpu_sync=True,
                                                 copy_topk_idx=True, **kwargs)
                parts.append(out[3])
                if single:
                    handle = LegacyHandle.of(parts, cap, is_token_in_rank, self.rank, fill)
                    return out[0], out[1], out[2], event, handle
            outs.append(out)
        handle = cached_handle or LegacyHandle.of(parts, cap, is_token_in_rank, self.rank, None)
        order = handle.order
        recv_x = _gather_rows([o[0] for o in outs], order)
        if cached is not None:
            return recv_x, None, None, EventOverlap(EventHandle())
        handle.fill_source_index([o[3] for o in outs])
        return (recv_x, _gather_rows([o[1] for o in outs], order), _gather_rows([o[2] for o in outs], order),
                EventOverlap(EventHandle()), handle)

    def combine(self, x: torch.Tensor, handle, topk_weights: torch.Tensor | None = None, bias=None,
                config: Config | None = None, previous_event=None, async_finish: bool = False,
                allocate_on_comm_stream: bool = False):
        """Plain sum over the ranks that received each token (+ biases), in rank order; weights
        are summed the same way."""
        if not isinstance(handle, LegacyHandle):
            raise V.fail("handle", "the handle dispatch returned", type(handle).__name__, TypeError)
        prev = previous_event.event if isinstance(previous_event, EventOverlap) else previous_event
        n = handle.num_received
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] < n:
            raise V.fail("x", f"a 2-D tensor of the {handle.num_rows} rows dispatch returned",
                         tuple(getattr(x, 'shape', ())))
        if topk_weights is not None and (not isinstance(topk_weights, torch.Tensor) or topk_weights.shape[0] < n):
            raise V.fail("topk_weights", f"the {handle.num_rows} rows dispatch returned",
                         tuple(getattr(topk_weights, 'shape', ())))
        x = x[:n]
        topk_weights = None if topk_weights is None else topk_weights[:n]
        if len(handle.parts) == 1:
            return self._ep._combine(x, handle.parts[0], topk_weights, bias, prev, async_finish,
                                     allocate_on_comm_stream or prev is not None, False, sum_weights=True)
        # Chunks: each chunk's rows (source-major order back to chunk-major) go back on their own.
        back = torch.empty_like(handle.order)
        back[handle.order] = torch.arange(n, device=back.device)
        x, topk_weights = x[back], None if topk_weights is None else topk_weights[back]
        biases = () if bias is None else ((bias,) if isinstance(bias, torch.Tensor) else tuple(bias))
        combined, weights, start, token = [], [], 0, 0
        for c, part in enumerate(handle.parts):
            rows = slice(start, start + part._plan.num_rows)
            tokens = slice(token, token + part._topk_idx.shape[0])
            start, token = rows.stop, tokens.stop
            y, w, _ = self._ep._combine(x[rows], part, None if topk_weights is None else topk_weights[rows],
                                        tuple(b[tokens] for b in biases) or None, prev if c == 0 else None, False,
                                        prev is not None, False, sum_weights=True)
            combined.append(y)
            weights.append(w)
        return torch.cat(combined), None if topk_weights is None else torch.cat(weights), EventOverlap(EventHandle())

    # ---- low-latency kernels -----------------------------------------------------------------
    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        """Nothing to clean: every operation's handshake already separates it from the previous one."""

    # ---- shrink / fault masks (enable_shrink=True) --------------------------------------------
    def _shrink_mask(self) -> torch.Tensor | None:
        """The host engine's mask table, or None where the engine keeps it on the device (Ascend: in its
        low-latency window, read and written by its update_mask / query_mask / clean_mask)."""
        if not self.enable_shrink:
            raise V.fail("enable_shrink", "True at construction for the low-latency mask", False)
        return self._ll.mask

    def low_latency_update_mask_buffer(self, rank: int, mask: bool = False) -> None:
        """Mask (``mask=True``) or unmask a rank for this rank's low-latency kernels: masked ranks
        are neither sent to nor waited for, and their experts add nothing to combined tokens.
        Ranks that time out or die inside a low-latency kernel are masked automatically."""
        table = self._shrink_mask()
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.group_size:
            raise V.fail("rank", f"an int in [0, {self.group_size})", repr(rank))
        if rank == self.rank and mask:
            raise V.fail("rank", f"another rank than this one ({self.rank}) with mask=True: a rank cannot mask itself", rank)
        if table is None:  # the Ascend engine: the mask is device memory in its low-latency window
            self._ll.update_mask(rank, mask)
        else:
            table[rank] = int(bool(mask))

    def low_latency_query_mask_buffer(self, mask_status: torch.Tensor) -> None:
        """Writes the mask into ``mask_status`` ([num_ranks] int32; 1 = masked)."""
        table = self._shrink_mask()
        if not isinstance(mask_status, torch.Tensor) or mask_status.dtype != torch.int32 \
                or tuple(mask_status.shape) != (self.group_size,):
            raise V.fail("mask_status", f"an int32 tensor of shape ({self.group_size},)",
                         f"{getattr(mask_status, 'dtype', type(mask_status))} "
                         f"{tuple(getattr(mask_status, 'shape', ()))}")
        if table is None:
            self._ll.query_mask(mask_status)
        else:
            mask_status.copy_(table)

    def low_latency_clean_mask_buffer(self) -> None:
        table = self._shrink_mask()
        if table is None:
            self._ll.clean_mask()
        else:
            table.zero_()

    def low_latency_dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, num_max_dispatch_tokens_per_rank: int,
                             num_experts: int, cumulative_local_expert_recv_stats: torch.Tensor | None = None,
                             dispatch_wait_recv_cost_stats: torch.Tensor | None = None, use_fp8: bool = True,
                             round_scale: bool = False, use_ue8m0: bool = False, async_finish: bool = False,
                             return_recv_hook: bool = False):
        """Returns ``(recv_x, recv_count, handle, event, hook)`` with ``recv_x`` packed per local expert."""
        if not self.low_latency_mode:
            raise V.fail("low_latency_mode", "True at construction for low_latency_dispatch", False)
        if async_finish and return_recv_hook:
            raise V.fail("return_recv_hook", "False with async_finish=True (they cannot both be set)", True)
        if use_ue8m0 and not round_scale:
            raise V.fail("use_ue8m0", "False unless round_scale=True", f"{use_ue8m0!r} with round_scale={round_scale!r}")
        if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16 or x.dim() != 2:
            raise V.fail("x", "a 2-D BF16 tensor", f"{getattr(x, 'dtype', type(x))} {tuple(getattr(x, 'shape', ()))}",
                         TypeError)
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
                                 col_major_sf=use_fp8,  # scales token-contiguous, as upstream packs them
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

        ``use_logfmt``: the rows travel in upstream's lossy LogFMT-10 format (host/logfmt.hpp) over
        shared memory; across hosts (the collective path) they stay BF16."""
        if zero_copy and use_logfmt:
            raise V.fail("use_logfmt", "False with zero_copy=True (they cannot be combined, as upstream)", True)
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
            combined, event = self._ll.combine(x, topk_idx, topk_weights, state, M, H, num_experts, out, run,
                                               logfmt=bool(use_logfmt))
            return combined, event or EventOverlap(), (lambda: None) if return_recv_hook else None
        if not isinstance(handle, LowLatencyHandle) or getattr(handle, "ep_handle", None) is None:
            raise V.fail("handle", "a handle from low_latency_dispatch (call its hook first in hook mode)",
                         "a handle whose hook was not called" if isinstance(handle, LowLatencyHandle)
                         else type(handle).__name__)
        ep_handle = handle.ep_handle
        e_local, RM, H = x.shape
        if not isinstance(topk_weights, torch.Tensor) or topk_weights.dtype != torch.float32 \
                or tuple(topk_weights.shape) != tuple(topk_idx.shape):
            raise V.fail("topk_weights", f"float32 of shape {tuple(topk_idx.shape)}",
                         f"{getattr(topk_weights, 'dtype', type(topk_weights))} "
                         f"{tuple(getattr(topk_weights, 'shape', ()))}")
        expanded = x.reshape(e_local * RM, H)  # the packed layout is the expanded layout
        combined, _, event = self._ep._combine(expanded, ep_handle, None, None, None, async_finish, False, False,
                                               multiple_reduction=False, slot_weights=topk_weights.contiguous())
        if out is not None:
            if async_finish:
                event.event.current_stream_wait()
            out.copy_(combined)
            combined = out
        return combined, event, (lambda: None) if return_recv_hook else None


def _first_rows(tensors, n, event=None, session=None):
    """Each tensor cut or padded to ``n`` rows (padding: -1 for int64 indices, zeros otherwise).
    When ``event`` is an asynchronous operation still filling ``tensors``, the padded copies are
    filled on the comm worker after it (the worker runs in order) and the returned event covers
    that copy too; returns ``(tensors, event)``."""
    copies = []

    def pad(t):
        if t is None or t.shape[0] >= n:
            return None if t is None else t[:n]
        out = torch.empty((n, *t.shape[1:]), dtype=t.dtype, device=t.device)
        tail = out[t.shape[0]:].view(torch.uint8) if t.element_size() == 1 else out[t.shape[0]:]
        tail.fill_(-1 if t.dtype == torch.int64 else 0)
        copies.append((out[:t.shape[0]], t))
        return out

    out = [tuple(pad(u) for u in t) if isinstance(t, tuple) else pad(t) for t in tensors]

    def copy(filling=event):
        if filling is not None:
            filling.current_stream_wait()
        for dst, src in copies:
            dst.copy_(src)

    pending = event is not None and event.event is not None and not event.event.query()
    if copies and pending:
        event = EventOverlap(EventHandle(future=session.submit(copy)))
    elif copies:
        copy()
    return out, event


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    t = t.reshape(-1, t.shape[-1])
    return t.view(torch.uint8) if t.element_size() == 1 else t



def _cast_to_fp8(x: torch.Tensor, round_scale: bool, ep) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference cast (utils/math.py); the host kernel on CPU, bit for bit."""
    return _dispatch.TABLE.run("per_token_cast_to_fp8", x.device, x, round_scale, ep._session.threads)
