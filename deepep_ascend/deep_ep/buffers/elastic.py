"""``ElasticBuffer`` (V2.1): the unified buffer before the V2.5 split, on the same engine."""
from __future__ import annotations

import torch
import torch.distributed as dist

from .ep import EPBuffer
from .pp import PPBuffer


class ElasticBuffer(EPBuffer):
    def __init__(self, group: dist.ProcessGroup | None = None, num_bytes: int | None = None,
                 num_cpu_bytes: int = 0, num_max_tokens_per_rank: int = 0, hidden: int = 0, num_topk: int = 0,
                 use_fp8_dispatch: bool = False, deterministic: bool = False, allow_hybrid_mode: bool = True,
                 allow_multiple_reduction: bool = True, prefer_overlap_with_compute: bool = True, sl_idx: int = 3,
                 num_allocated_qps: int = 0, num_cpu_timeout_secs: int = 300, num_gpu_timeout_secs: int = 100,
                 explicitly_destroy: bool = False):
        if num_bytes is not None:
            num_bytes += num_cpu_bytes
        super().__init__(group, num_bytes, num_max_tokens_per_rank, hidden, num_topk, use_fp8_dispatch, 0,
                         deterministic, allow_hybrid_mode, allow_multiple_reduction, prefer_overlap_with_compute,
                         sl_idx, num_allocated_qps, num_cpu_timeout_secs, num_gpu_timeout_secs, explicitly_destroy)
        self.num_cpu_bytes = num_cpu_bytes
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

    def _release(self) -> None:
        if not self._destroyed:
            try:
                self._pp_flush()
            except Exception:
                pass  # a peer that is gone: nothing left to deliver to
        super()._release()
