"""``ElasticBuffer`` (V2.1): the unified buffer before the V2.5 split, on the same engines.

``num_bytes`` is the whole buffer: ``num_bytes - num_cpu_bytes`` for the EP region (also the AGRS
sessions' area) and ``num_cpu_bytes`` for the Engram table (an ``EngramBuffer``'s window).
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Union

import torch
import torch.distributed as dist

from deepjit import validation as V

from ..engine.layout import ALLOCATION_ALIGNMENT
from ..utils.math import align
from .agrs import AgrsSessions, session_bytes, shape_list
from .engram import EngramBuffer
from .ep import EPBuffer
from .pp import PPBuffer

_Shapes = Union[tuple, torch.Size, Sequence[Union[tuple, torch.Size]]]


class ElasticBuffer(EPBuffer):
    def __init__(self, group: dist.ProcessGroup | None = None, num_bytes: int | None = None,
                 num_cpu_bytes: int = 0, num_max_tokens_per_rank: int = 0, hidden: int = 0, num_topk: int = 0,
                 use_fp8_dispatch: bool = False, deterministic: bool = False, allow_hybrid_mode: bool = True,
                 allow_multiple_reduction: bool = True, prefer_overlap_with_compute: bool = True, sl_idx: int = 3,
                 num_allocated_qps: int = 0, num_cpu_timeout_secs: int = 300, num_gpu_timeout_secs: int = 100,
                 explicitly_destroy: bool = False):
        if isinstance(num_cpu_bytes, bool) or not isinstance(num_cpu_bytes, int) or num_cpu_bytes < 0:
            raise V.fail("num_cpu_bytes", "a non-negative int", repr(num_cpu_bytes))
        if num_cpu_bytes and (num_bytes is None or num_bytes <= num_cpu_bytes):
            raise V.fail("num_bytes", f"GPU + CPU bytes, more than num_cpu_bytes ({num_cpu_bytes})", repr(num_bytes))
        total = num_bytes
        if num_bytes is not None:
            num_bytes -= num_cpu_bytes
        super().__init__(group, num_bytes, num_max_tokens_per_rank, hidden, num_topk, use_fp8_dispatch, 0,
                         deterministic, allow_hybrid_mode, allow_multiple_reduction, prefer_overlap_with_compute,
                         sl_idx, num_allocated_qps, num_cpu_timeout_secs, num_gpu_timeout_secs, explicitly_destroy)
        self.num_gpu_bytes = self.num_bytes
        if total is not None:
            self.num_bytes = total
        self.num_cpu_bytes = num_cpu_bytes
        self._engram: EngramBuffer | None = None
        if num_cpu_bytes:
            self._engram = EngramBuffer(self.group, self.num_gpu_bytes, num_cpu_bytes, True, self.num_allocated_qps,
                                        16, allow_hybrid_mode=allow_hybrid_mode,
                                        num_gpu_timeout_secs=num_gpu_timeout_secs)
        self._agrs: AgrsSessions | None = None
        self._pp: PPBuffer | None = None
        self._pp_sends: list = []   # (event, staged copy) of sends not yet known to be delivered

    def barrier(self, use_comm_stream: bool = True, with_cpu_sync: bool = False, sequential: bool = True) -> None:
        """V2.1 signature (V2.5 renamed the first argument ``wait_comm_stream``)."""
        super().barrier(use_comm_stream, with_cpu_sync, sequential)

    def dispatch(self, x, topk_idx=None, topk_weights=None, cumulative_local_expert_recv_stats=None, num_experts=None,
                 num_max_tokens_per_rank=None, expert_alignment=None, num_sms: int = 0, num_qps: int = 0,
                 previous_event=None, previous_event_before_epilogue=None, async_with_compute_stream: bool = False,
                 allocate_on_comm_stream: bool = False, handle=None, do_handle_copy: bool = True, do_cpu_sync=None,
                 do_expand: bool = False, do_zero_padding: bool = False, use_tma_aligned_col_major_sf: bool = False):
        """V2.1 signature; ``do_handle_copy=True`` clones ``topk_idx`` into the handle."""
        self._check_alive()
        if previous_event_before_epilogue is not None:
            previous_event_before_epilogue.current_stream_wait()
        return self._dispatch(x, topk_idx, topk_weights, cumulative_local_expert_recv_stats, num_experts,
                              num_max_tokens_per_rank, expert_alignment, num_sms, previous_event,
                              async_with_compute_stream, allocate_on_comm_stream, handle, do_cpu_sync, do_expand,
                              do_zero_padding, use_tma_aligned_col_major_sf, False,
                              copy_topk_idx=do_handle_copy and handle is None)

    def combine(self, x, handle, topk_weights=None, bias=None, num_sms: int = 0, num_qps: int = 0,
                previous_event=None, previous_event_before_epilogue=None, async_with_compute_stream: bool = False,
                allocate_on_comm_stream: bool = False):
        self._check_alive()
        if previous_event_before_epilogue is not None:
            previous_event_before_epilogue.current_stream_wait()
        return self._combine(x, handle, topk_weights, bias, previous_event, async_with_compute_stream,
                             allocate_on_comm_stream, False)

    # ---- pipeline parallel (V2.1: on the buffer itself; V2.5 moved it to PPBuffer) -------------
    @staticmethod
    def get_pp_buffer_size_hint(num_max_tensor_bytes: int, num_max_inflight_tensors: int) -> int:
        return PPBuffer.get_buffer_size_hint(num_max_tensor_bytes, num_max_inflight_tensors)

    def pp_set_config(self, num_max_tensor_bytes: int, num_max_inflight_tensors: int) -> None:
        """Collective; earlier sends are delivered first (upstream: a barrier flushes them)."""
        self._check_alive()
        self._pp_flush()
        self._pp = PPBuffer(self.group, num_max_tensor_bytes, num_max_inflight_tensors)

    def pp_send(self, t: torch.Tensor, dst_rank_idx: int, num_sms: int = 0) -> None:
        """Returns at once, ``t`` free for reuse: it is staged (as upstream copies it into its send
        buffer) and delivered when the receiver posts the matching ``pp_recv``. A send never waits
        for its receiver here (gloo's would until the receive is posted, and a rank that waits
        to send cannot post the receives its peer waits for)."""
        pp = self._pp_config()
        staged = t.clone() if isinstance(t, torch.Tensor) else t
        self._pp_sends = [(e, s) for e, s in self._pp_sends if not e.event.query()]   # delivered: dropped
        self._pp_sends.append((pp.send(staged, dst_rank_idx, num_sms), staged))

    def pp_recv(self, t: torch.Tensor, src_rank_idx: int, num_sms: int = 0) -> None:
        """Blocks until ``t`` holds the next tensor ``src_rank_idx`` sent to this rank (FIFO per pair)."""
        self._pp_config().recv(t, src_rank_idx, num_sms).current_stream_wait()

    def _pp_config(self) -> PPBuffer:
        if self._pp is None:
            raise RuntimeError("call pp_set_config(num_max_tensor_bytes, num_max_inflight_tensors) first")
        self._check_alive()
        return self._pp

    def _pp_flush(self) -> None:
        sends, self._pp_sends = self._pp_sends, []
        for event, _ in sends:
            event.current_stream_wait()

    # ---- Engram (V2.1: on the buffer itself; V2.5 moved it to EngramBuffer) ----------------------
    @staticmethod
    def get_engram_storage_size_hint(num_entries: int, hidden: int, num_max_tokens_per_rank: int,
                                     dtype: torch.dtype = torch.bfloat16) -> tuple[int, int]:
        """``(num_gpu_bytes, num_cpu_bytes)``: fetched rows (``num_max_tokens_per_rank`` counts
        entries fetched at once) and this rank's table, entries 32-byte aligned, each 2 MiB aligned."""
        if not isinstance(dtype, torch.dtype):
            raise V.fail("dtype", "a torch.dtype", type(dtype).__name__, TypeError)
        entry = align(hidden * dtype.itemsize, 32)
        return (align(entry * num_max_tokens_per_rank, ALLOCATION_ALIGNMENT),
                align(entry * num_entries, ALLOCATION_ALIGNMENT))

    def engram_write(self, storage: torch.Tensor, sf: torch.Tensor | None = None) -> None:
        """Collective: every rank stores its ``[num_entries, hidden]`` shard (BF16, or FP8 with the
        globally replicated ``sf [num_ranks * num_entries, packs]``); barriers before and after."""
        self._check_alive()
        if self._engram is None:
            raise V.fail("num_cpu_bytes", "a value > 0 at construction for engram_write (see "
                         "get_engram_storage_size_hint)", 0)
        V.tensor("storage", storage, dtypes=(torch.bfloat16, torch.float8_e4m3fn), ndim=2, contiguous=True)
        if 0 in storage.shape:
            raise V.fail("storage", "a non-empty [num_entries, hidden] tensor", f"shape {tuple(storage.shape)}")
        if (sf is not None) != (storage.dtype == torch.float8_e4m3fn):
            raise V.fail("sf", f"the replicated scaling factors exactly when storage is FP8 (storage: {storage.dtype})",
                         "None" if sf is None else "a tensor")
        if sf is not None:   # every rank's scales, [num_ranks * num_entries, packs]: all checked before set_config
            V.tensor("sf", sf, dtypes=(torch.float32, torch.int32), shape=(self.group.size() * storage.shape[0], None))
            if sf.shape[1] == 0:
                raise V.fail("sf", "at least one scale pack per entry", f"shape {tuple(sf.shape)}")
        if storage.numel() * storage.element_size() > self.num_cpu_bytes:
            raise V.fail("storage", f"at most num_cpu_bytes ({self.num_cpu_bytes}) bytes",
                         f"{storage.numel() * storage.element_size()} bytes")
        num_entries, hidden = storage.shape
        packs = sf.shape[1] if sf is not None else 0
        # One entry per fetched row: fetch sends [T * entries] ids, up to what the GPU part holds.
        rows = max(1, self.num_gpu_bytes // (hidden * storage.element_size()))
        self._engram.set_config([num_entries], hidden, rows, 1, storage.dtype, packs)
        self._engram.write([storage], None if sf is None else [sf])

    def engram_fetch(self, indices: torch.Tensor, num_qps: int = 0,
                     use_tma_aligned_col_major_sf: bool = False) -> Callable:
        """``indices [T, entries_per_token]`` int32 global ids (``rank * num_entries + i``); the
        hook returns ``(data [T, entries_per_token * hidden], sf [T, entries_per_token * packs] or None)``."""
        self._check_alive()
        if self._engram is None or not self._engram._written:
            raise ValueError("call engram_write(...) before engram_fetch")
        V.tensor("indices", indices, dtypes=(torch.int32,), ndim=2)
        T, per_token = indices.shape
        rows = self._engram._config[2]
        if T * per_token > rows:
            raise V.fail("indices", f"at most the {rows} entries the buffer's GPU part holds (num_bytes - num_cpu_bytes = "
                         f"{self.num_gpu_bytes})", f"{T * per_token} entries")
        V.integer("num_qps", num_qps, 0, self._engram.num_allocated_qps)
        got = self._engram.fetch(indices.reshape(1, T * per_token, 1), num_qps, False)[0]()
        data, sf = got if isinstance(got, tuple) else (got, None)
        data = data.view(T, -1)
        if sf is not None:
            sf = sf.reshape(T, -1)
            if use_tma_aligned_col_major_sf:
                sf = sf.T.contiguous().T
        return lambda: (data, sf)

    # ---- AGRS (V2.1 experimental all-gather sessions) -------------------------------------------
    @staticmethod
    def get_agrs_num_max_session_bytes(group: dist.ProcessGroup, shapes: _Shapes, dtype: torch.dtype) -> int:
        return session_bytes(group.size(), shapes, dtype)

    @staticmethod
    def get_agrs_buffer_size_hint(group: dist.ProcessGroup, num_max_session_bytes: int) -> int:
        return align(num_max_session_bytes, ALLOCATION_ALIGNMENT)

    def agrs_set_config(self, num_max_session_bytes: int, num_max_all_gathers_per_session: int) -> None:
        """Collective; earlier operations finish first."""
        self._check_alive()
        if self._agrs is not None and self._agrs._open:
            raise RuntimeError("agrs_set_config inside an open AGRS session")
        self._session.start("agrs_set_config", ("operation",), lambda: [20])
        self._agrs = AgrsSessions(self._session, self.num_gpu_bytes, num_max_session_bytes,
                                  num_max_all_gathers_per_session)

    def _agrs_config(self) -> AgrsSessions:
        self._check_alive()
        if self._agrs is None:
            raise RuntimeError("call agrs_set_config(num_max_session_bytes, num_max_all_gathers_per_session) first")
        return self._agrs

    def create_agrs_session(self) -> None:
        self._agrs_config().create()

    def destroy_agrs_session(self) -> None:
        """Collective: the session's buffer is free on every rank when it returns."""
        self._agrs_config().destroy()

    @contextlib.contextmanager
    def agrs_new_session(self, enabled: bool = True):
        if not enabled:
            yield
            return
        self.create_agrs_session()
        try:
            yield
        finally:
            self.destroy_agrs_session()

    def agrs_get_inplace_tensor(self, shapes: _Shapes, dtype: torch.dtype):
        """This rank's shard(s) of the next all-gather slot(s): fill them and gather them in the same order."""
        if not isinstance(dtype, torch.dtype):
            raise V.fail("dtype", "a torch.dtype", type(dtype).__name__, TypeError)
        batched, shapes = shape_list(shapes)
        raw = self._agrs_config().inplace_tensors([math.prod(s) * dtype.itemsize for s in shapes])
        out = tuple(r.view(dtype).view(s) for r, s in zip(raw, shapes, strict=True))
        return out if batched else out[0]

    def all_gather(self, t: Union[torch.Tensor, Sequence[torch.Tensor]]):
        """``(gathered [R, *shape], handle)`` for a tensor, ``(*gathered, handle)`` for a sequence."""
        if isinstance(t, torch.Tensor):
            out, handle = self._agrs_config().all_gather((t,))
            return out[0], handle
        # anything else goes to the collective check, which refuses it on every rank together
        out, handle = self._agrs_config().all_gather(tuple(t) if isinstance(t, (list, tuple)) else (t,))
        return *out, handle

    def _release(self) -> None:
        if not self._destroyed:
            try:
                self._pp_flush()
            except Exception:
                pass  # a peer that is gone: nothing left to deliver to
            if self._engram is not None:
                self._engram._release()
        super()._release()
