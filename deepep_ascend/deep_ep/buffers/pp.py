"""``PPBuffer`` (V2.5): pipeline-parallel send/recv between ring neighbours.

Transfers are matched first-in first-out per (source, destination) pair, as upstream; they go
through ``torch.distributed`` point-to-point operations on either transport.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from deepjit import validation as V

from ..utils.event import EventHandle, EventOverlap
from ..utils.math import align
from .base import BufferBase


class PPBuffer(BufferBase):
    def __init__(self, group: dist.ProcessGroup, num_max_tensor_bytes: int, num_max_inflight_tensors: int,
                 sl_idx=None, num_gpu_timeout_secs: int = 100, explicitly_destroy: bool = False):
        super().__init__(explicitly_destroy)
        for name, value in (("num_max_tensor_bytes", num_max_tensor_bytes),
                            ("num_max_inflight_tensors", num_max_inflight_tensors)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise V.fail(name, "a positive int", repr(value))
        self.group = group
        self.rank_idx = group.rank()
        self.num_ranks = group.size()
        self.num_max_tensor_bytes = num_max_tensor_bytes
        self.num_max_inflight_tensors = num_max_inflight_tensors
        self.num_bytes = self.get_buffer_size_hint(num_max_tensor_bytes, num_max_inflight_tensors)
        dist.barrier(group=group)

    @staticmethod
    def get_buffer_size_hint(num_max_tensor_bytes: int, num_max_inflight_tensors: int) -> int:
        return align(num_max_tensor_bytes, 32) * num_max_inflight_tensors * 2 * 2

    def _check(self, x: torch.Tensor, peer: int, name: str) -> int:
        self._check_alive()
        if not isinstance(x, torch.Tensor) or not x.is_contiguous():
            raise V.fail("x", "a contiguous tensor", f"strides {x.stride()}" if isinstance(x, torch.Tensor) else type(x).__name__)
        nbytes = x.numel() * x.element_size()
        if nbytes > self.num_max_tensor_bytes:
            raise V.fail("x", f"at most num_max_tensor_bytes ({self.num_max_tensor_bytes}) bytes", f"{nbytes} bytes")
        neighbours = {(self.rank_idx + 1) % self.num_ranks, (self.rank_idx - 1) % self.num_ranks}
        if peer not in neighbours:
            raise V.fail(name, f"a ring neighbour of rank {self.rank_idx} ({sorted(neighbours)})", peer)
        return dist.get_global_rank(self.group, peer)

    def send(self, x: torch.Tensor, dst_rank_idx: int, num_sms=None) -> EventOverlap:
        """Starts the transfer; wait on the event before modifying ``x``."""
        work = dist.isend(x, self._check(x, dst_rank_idx, "dst_rank_idx"), group=self.group)
        return EventOverlap(EventHandle(work=work))

    def recv(self, x: torch.Tensor, src_rank_idx: int, num_sms=None) -> EventOverlap:
        """Starts receiving into ``x``; its contents are valid once the event is waited on."""
        work = dist.irecv(x, self._check(x, src_rank_idx, "src_rank_idx"), group=self.group)
        return EventOverlap(EventHandle(work=work))
