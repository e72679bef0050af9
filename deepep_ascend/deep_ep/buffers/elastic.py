"""``ElasticBuffer`` (V2.1): the unified buffer before the V2.5 split, on the same engine."""
from __future__ import annotations

import torch.distributed as dist

from .ep import EPBuffer


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
