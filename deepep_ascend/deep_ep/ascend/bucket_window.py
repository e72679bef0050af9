"""BucketBuffer's storage in a symmetric window (``EP_BACKEND=ascend`` on the twin where the window serves:
transport_choice.py): the
storage (and the session staging area behind it) is this rank's window data, the same size and offsets
on every rank, so a collective is kernels reading the peers' windows directly (bucket.asc): no
collective, no host read of the payload.

A collective is one step ``seq``: an arrival kernel (every rank's flag ``rank`` := seq on every rank,
then wait for all: every rank's inputs are in place), the data kernels (gathers through UB, reductions
on the vector cores in FP32 in rank order: the host engine's bits), a departure kernel (flags
``R + rank``: every rank has read its peers, so sources may be overwritten). A rank that never arrives
fails the waiting kernel after the window's timeout, naming rank and flag. Layout: data bytes
``[0, num_bytes)``; flags ``2 * R``.
"""
from __future__ import annotations

import torch

from .._lib import LIB
from .symm_exchange import _kernel_args

GRID = 8   # blocks of the data kernels


class BucketWindow:
    def __init__(self, group, num_bytes: int, device: torch.device, timeout_s: float | None):
        from deepjit.symm import DeviceWindow

        self.window = DeviceWindow.create(group, num_bytes, num_flags=2 * group.size(), name_hint="bucket",
                                          device=device, timeout_s=timeout_s)
        self.rank, self.num_ranks = self.window.rank, self.window.num_ranks
        self.num_bytes = num_bytes
        self.seq = 0

    def storage(self) -> torch.Tensor:
        """This rank's data bytes as a tensor (the twin's window is host shared memory)."""
        return self.window.data(self.rank, torch.uint8, (self.num_bytes,))

    def _launch(self, blocks: int, out: torch.Tensor | None, **fields) -> None:
        if out is None:
            out = torch.zeros(1, dtype=torch.uint8, device=self.window.device)
        defaults = {"src_offset": 0, "src_step": 0, "num_bytes": 0, "num_elems": 0, "scale": 1.0, "flag_base": 0,
                    "bf16": 0, "skip_rank": -1}
        LIB.ascend_kernel("ep_bucket", "ascend/bucket.asc", {})(
            blocks, _kernel_args("EpBucketArgs", out=out.reshape(-1).view(torch.uint8),
                                 **self.window.kernel_fields(), seq=self.seq, **{**defaults, **fields}))

    def arrive(self) -> None:
        """Starts a step: returns (on the stream) once every rank's inputs are in place."""
        self.seq += 1
        self._launch(1, None, op=0, flag_base=0)

    def depart(self) -> None:
        """Ends a step: returns once every rank has finished reading its peers."""
        self._launch(1, None, op=0, flag_base=self.num_ranks)

    def gather(self, out: torch.Tensor, src_offset: int, src_step: int, shard_bytes: int, skip_rank: int) -> None:
        """``out`` (contiguous, R shards) := every rank p's ``shard_bytes`` at ``src_offset + p * src_step``."""
        if shard_bytes:
            self._launch(GRID, out, op=1, src_offset=src_offset, src_step=src_step, num_bytes=shard_bytes,
                         skip_rank=skip_rank)

    def reduce(self, out: torch.Tensor, src_offset: int, scale: float, bf16: bool) -> None:
        """``out`` (FP32, contiguous) := scale * the rank-ordered sum of every rank's FP32 elements at
        ``src_offset``."""
        if out.numel():
            self._launch(GRID, out, op=2, src_offset=src_offset, num_elems=out.numel(), scale=float(scale),
                         bf16=int(bf16))

    def destroy(self) -> None:
        if self.window is not None:
            self.window.destroy()
            self.window = None
