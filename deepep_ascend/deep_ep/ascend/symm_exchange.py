"""Kernel-initiated row exchange through a symmetric window (deepjit.symm.DeviceWindow): what replaces
the count all-gather and the ``all_to_all_single`` of the collective transport (transport.py) for
ranks that share symmetric memory (an NPU supernode over CANN SHMEM; the twin: ranks of one host).

``exchange(rows, pos, counts, out, row_start)``: row ``i`` of ``rows`` goes to every rank ``d`` with
``pos[i, d] >= 0`` as row ``pos[i, d]`` of this rank's region of ``d``'s inbox, ``counts[d]`` rows in
all; every rank receives into ``out`` the rows of source 0, then source 1, ... back to back (each
source's rows in slot order) and ``row_start`` ``[R + 1]`` (first row of each source, then the total).
That is ``all_to_all_single`` with splits from the counts, without the host ever reading a count: the
counts travel through the window with the rows (symm_send.asc / symm_recv.asc, layout in
symm_exchange.h), so an exchange can be captured in a graph and never waits on the host.

Every rank calls ``exchange`` the same number of times (it is collective: the flags carry the exchange
number). A peer that never arrives fails the waiting kernels after the window's timeout, naming rank
and flag. Ranks on several hosts without a supernode keep the collective transport.
"""
from __future__ import annotations

import math

import torch

from .._lib import LIB

COUNT_BYTES = 512          # symm_exchange.h kCountBytes: two banks of up to 64 ranks
MAX_ROW_BYTES = 96 * 1024  # symm_exchange.h kRowBufferBytes: one row staged in UB


def _row_stride(row_bytes: int) -> int:
    return (row_bytes + 31) // 32 * 32


def _kernel_args(struct: str, **fields):
    from deepjit import descriptors, kernel_args
    return kernel_args.pack(descriptors.struct_type(LIB.source("ascend/kernel_args.h"), struct), **fields)


class SymmExchange:
    """One rank's side of the window exchange for up to ``max_rows`` rows of up to ``max_row_bytes``
    bytes from each source (created collectively over ``group``)."""

    def __init__(self, group, max_rows: int, max_row_bytes: int, device: torch.device | str = "cpu",
                 timeout_s: float | None = None):
        from deepjit.symm import DeviceWindow

        if not 0 < max_row_bytes <= MAX_ROW_BYTES:
            raise ValueError(f"max_row_bytes must be in [1, {MAX_ROW_BYTES}], got {max_row_bytes}")
        if max_rows < 1:
            raise ValueError(f"max_rows must be positive, got {max_rows}")
        R = group.size() if group is not None else torch.distributed.get_world_size()
        if R > COUNT_BYTES // 8:
            raise ValueError(f"the window exchange serves up to {COUNT_BYTES // 8} ranks, got {R}")
        self.max_rows, self.max_row_bytes = max_rows, max_row_bytes
        self.region_bytes = max_rows * _row_stride(max_row_bytes)   # one source's inbox region
        self.window = DeviceWindow.create(group, COUNT_BYTES + R * self.region_bytes,
                                          num_flags=2 * R, name_hint="ep", device=device, timeout_s=timeout_s)
        self.rank, self.num_ranks = self.window.rank, self.window.num_ranks
        self.seq = 0

    def exchange(self, rows: torch.Tensor, pos: torch.Tensor, counts: torch.Tensor, out: torch.Tensor,
                 row_start: torch.Tensor) -> None:
        """See the module docstring. ``rows`` ``[N, ...]`` and ``out`` ``[M_out, ...]`` contiguous with
        equal row sizes; ``pos`` int32 ``[N, R]``; ``counts`` int32 ``[R]``; ``row_start`` int32 ``[R + 1]``.
        Only shapes are checked on the host; positions and counts are clamped by the kernels."""
        R = self.num_ranks
        row_bytes = math.prod(rows.shape[1:]) * rows.element_size()   # from the shape: either may have 0 rows
        out_row = math.prod(out.shape[1:]) * out.element_size()
        if not rows.is_contiguous() or not out.is_contiguous() or row_bytes != out_row:
            raise ValueError(f"rows and out must be contiguous with equal row sizes, got {row_bytes} and {out_row} "
                             f"bytes")
        if row_bytes > self.max_row_bytes:
            raise ValueError(f"rows of {row_bytes} bytes exceed the exchange's {self.max_row_bytes}")
        for name, t, shape in (("pos", pos, (rows.shape[0], R)), ("counts", counts, (R,)),
                               ("row_start", row_start, (R + 1,))):
            if t.dtype != torch.int32 or tuple(t.shape) != shape or not t.is_contiguous():
                raise ValueError(f"{name} must be a contiguous int32 tensor of shape {shape}, got {t.dtype} "
                                 f"{tuple(t.shape)}")
        dev = torch.device(self.window.device)
        for name, t in (("rows", rows), ("out", out), ("pos", pos), ("counts", counts), ("row_start", row_start)):
            if t.device != dev:  # a host pointer must never reach the kernels
                raise ValueError(f"{name} must be on the window's device {dev}, got {t.device}")
        self.seq += 1
        fields = self.window.kernel_fields()
        src = rows.reshape(-1).view(torch.uint8) if rows.numel() else torch.zeros(1, dtype=torch.uint8, device=dev)
        dst = out.reshape(-1).view(torch.uint8) if out.numel() else torch.zeros(1, dtype=torch.uint8, device=dev)
        LIB.ascend_kernel("ep_symm_exchange_send", "ascend/symm_send.asc", {})(
            R, _kernel_args("EpSymmSendArgs", rows=src, pos=pos if pos.numel() else torch.full((1, R), -1,
                                                                                                dtype=torch.int32,
                                                                                                device=dev),
                            counts=counts, **fields, num_rows=rows.shape[0], row_bytes=row_bytes,
                            max_rows=self.max_rows, region_bytes=self.region_bytes, seq=self.seq, pad=0))
        LIB.ascend_kernel("ep_symm_exchange_recv", "ascend/symm_recv.asc", {})(
            R, _kernel_args("EpSymmRecvArgs", out=dst, row_start=row_start, **fields, out_rows=out.shape[0],
                            row_bytes=row_bytes, max_rows=self.max_rows, region_bytes=self.region_bytes,
                            seq=self.seq, pad=0))

    def destroy(self) -> None:
        self.window.destroy()
