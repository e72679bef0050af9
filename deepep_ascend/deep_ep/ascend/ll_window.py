"""The low-latency kernels' symmetric window (the default where the ranks share one: transport_choice.py):
what replaces the equal-split ``all_to_all`` of ascend/low_latency.py for ranks that share symmetric
memory, and where the shrink mode's rank mask lives.

Low-latency slots are fixed per rank pair, so an exchange needs no counts: ``exchange(rows, pos, out,
rows_per_source)`` puts row ``i`` at slot ``pos[i, d]`` of this rank's region of every rank ``d``'s
inbox (ll_send.asc) and copies the first ``rows_per_source`` slots of every source's region into
``out`` source by source (ll_recv.asc): the layout of ``all_to_all_single`` with equal splits. Nothing
is read on the host. Layout and flags: ll_window.h.

The mask (int32 ``[R]``, 1 = masked) is the first data words of this rank's window: the kernels read it
on the device, skip masked ranks (neither sent to nor waited for; their rows of ``out`` are left as they
were) and, in shrink mode, mask a rank whose wait times out instead of failing. ``set_mask`` /
``read_mask`` / ``write_mask`` are one-block kernels (ll_mask.asc), so the mask stays device memory
(CANN SHMEM on an NPU) and no step reads it on the host. Unmasking a rank also tells it that this rank
is done with its rows up to the last exchange (its region here is free): a rank masked while alive
takes part again once both sides have unmasked each other at the same point of their call sequences.

The window is created collectively with the engine (the buffer's construction) and grows collectively
at the first call that needs more rows or wider rows (every rank makes the same calls with the same
sizes), the mask carried over on the device. Growing needs every rank: a buffer that may lose ranks
(``enable_shrink``) should reach its largest shape before one fails.
"""
from __future__ import annotations

import math

import torch

from deepjit import validation as V

from .._lib import LIB
from .symm_exchange import MAX_ROW_BYTES, _kernel_args, _row_stride

MASK_BYTES = 512   # ll_window.h kMaskBytes: up to 128 ranks


class LowLatencyWindow:
    """One rank's side (created collectively over ``group``)."""

    def __init__(self, group, device: torch.device, timeout_s: float | None):
        self.group, self.device, self.timeout_s = group, torch.device(device), timeout_s
        R = group.size()
        if R > MASK_BYTES // 4:
            raise V.fail("group", f"at most {MASK_BYTES // 4} ranks for the low-latency window", R)
        self.num_ranks = R
        self.window = None
        self.max_rows = self.max_row_bytes = 0
        self._create(1, 32)

    def _create(self, max_rows: int, max_row_bytes: int) -> None:
        from deepjit.symm import DeviceWindow

        R = self.num_ranks
        self.max_rows, self.max_row_bytes = max_rows, max_row_bytes
        self.region_bytes = max_rows * _row_stride(max_row_bytes)
        self.window = DeviceWindow.create(self.group, MASK_BYTES + R * self.region_bytes, num_flags=2 * R,
                                          name_hint="ll", device=self.device, timeout_s=self.timeout_s)
        self.rank = self.window.rank
        self.seq = 0

    def ready(self, max_rows: int, max_row_bytes: int) -> None:
        """Grows the window (collectively) to serve ``max_rows`` slots of ``max_row_bytes`` per source."""
        if not 0 < max_row_bytes <= MAX_ROW_BYTES:
            raise V.fail("hidden", f"rows of at most {MAX_ROW_BYTES} bytes for the low-latency window",
                         f"{max_row_bytes} bytes")
        if max_rows <= self.max_rows and max_row_bytes <= self.max_row_bytes:
            return
        mask = self.read_mask()
        old = self.window
        self._create(max(max_rows, self.max_rows), max(max_row_bytes, self.max_row_bytes))
        old.destroy()
        self.write_mask(mask)

    @property
    def kernel_timeout_s(self) -> float:
        return self.window.timeout_s

    # ---- the exchange -------------------------------------------------------------------------------
    def exchange(self, rows: torch.Tensor, pos: torch.Tensor, out: torch.Tensor, rows_per_source: int,
                 shrink: bool) -> None:
        """``rows`` ``[N, ...]`` and ``out`` ``[R * rows_per_source, ...]`` contiguous, equal row sizes;
        ``pos`` int32 ``[N, R]`` (-1: not to that rank). Collective (every rank, same order)."""
        R = self.num_ranks
        row_bytes = math.prod(rows.shape[1:]) * rows.element_size()
        out_row = math.prod(out.shape[1:]) * out.element_size()
        if not rows.is_contiguous() or not out.is_contiguous() or row_bytes != out_row:
            raise ValueError(f"rows and out must be contiguous with equal row sizes, got {row_bytes} and {out_row} "
                             f"bytes")
        if row_bytes > self.max_row_bytes or rows_per_source > self.max_rows:
            raise ValueError(f"{rows_per_source} rows of {row_bytes} bytes exceed the window's {self.max_rows} of "
                             f"{self.max_row_bytes}")
        if tuple(out.shape[:1]) != (R * rows_per_source,):
            raise ValueError(f"out must have {R * rows_per_source} rows, got {tuple(out.shape)}")
        if pos.dtype != torch.int32 or tuple(pos.shape) != (rows.shape[0], R) or not pos.is_contiguous():
            raise ValueError(f"pos must be a contiguous int32 tensor of shape {(rows.shape[0], R)}, got {pos.dtype} "
                             f"{tuple(pos.shape)}")
        dev = torch.device(self.window.device)
        for name, t in (("rows", rows), ("out", out), ("pos", pos)):
            if t.device != dev:  # a host pointer must never reach the kernels
                raise ValueError(f"{name} must be on the window's device {dev}, got {t.device}")
        self.seq += 1
        fields = self.window.kernel_fields()
        src = rows.reshape(-1).view(torch.uint8) if rows.numel() else torch.zeros(1, dtype=torch.uint8, device=dev)
        if not pos.numel():
            pos = torch.full((1, R), -1, dtype=torch.int32, device=dev)
        LIB.ascend_kernel("ep_ll_send", "ascend/ll_send.asc", {})(
            R, _kernel_args("EpLLSendArgs", rows=src, pos=pos, **fields, num_rows=rows.shape[0], row_bytes=row_bytes,
                            max_rows=self.max_rows, region_bytes=self.region_bytes, seq=self.seq,
                            shrink=int(shrink)))
        LIB.ascend_kernel("ep_ll_recv", "ascend/ll_recv.asc", {})(
            R, _kernel_args("EpLLRecvArgs", out=out.reshape(-1).view(torch.uint8), **fields,
                            rows_per_source=rows_per_source, row_bytes=row_bytes, max_rows=self.max_rows,
                            region_bytes=self.region_bytes, seq=self.seq, shrink=int(shrink)))

    # ---- the mask -----------------------------------------------------------------------------------
    def _mask_op(self, op: int, buf: torch.Tensor | None = None, rank: int = 0, value: int = 0) -> None:
        dev = torch.device(self.window.device)
        if buf is None:
            buf = torch.zeros(self.num_ranks, dtype=torch.int32, device=dev)
        LIB.ascend_kernel("ep_ll_mask", "ascend/ll_mask.asc", {})(
            1, _kernel_args("EpLLMaskArgs", buf=buf, **self.window.kernel_fields(), op=op, rank=rank, value=value,
                            seq=self.seq))

    def set_mask(self, rank: int, value: int) -> None:
        self._mask_op(0, rank=rank, value=value)

    def read_mask(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """The mask into ``out`` (a contiguous int32 ``[R]`` on the window's device; new if None)."""
        out = torch.empty(self.num_ranks, dtype=torch.int32, device=self.window.device) if out is None else out
        self._mask_op(1, out)
        return out

    def write_mask(self, values: torch.Tensor) -> None:
        self._mask_op(2, values.to(device=self.window.device, dtype=torch.int32).contiguous())

    def destroy(self) -> None:
        if self.window is not None:
            self.window.destroy()
            self.window = None
