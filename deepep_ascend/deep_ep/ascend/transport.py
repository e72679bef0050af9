"""The NPU transport: ``torch.distributed`` collectives over an HCCL process group (gloo for CPU
tensors under ``EP_BACKEND=ascend``), across any number of hosts.

Per dispatch the count rows travel once, in one all-gather of a fixed-size int32 vector per rank
(its ``[R, C]`` count rows and its four error words): it is the only device-to-host read of a
dispatch, and every rank gets every rank's rows (the V1 facade reports the whole
``rank_prefix_matrix``). The payloads then move with ``all_to_all_single`` and exact splits from
those counts; combine uses the reverse splits. Receive staging buffers persist and only grow.

Every collective is waited on with the buffer's ``num_cpu_timeout_secs``: a peer that stops taking
part (dead, or late past the timeout) fails the wait on every rank still in it, with
``CollectiveTimeoutError`` or ``CollectiveError``, and the session is left broken.
"""
from __future__ import annotations

import math
from datetime import timedelta

import torch
import torch.distributed as dist


class CollectiveError(RuntimeError):
    """A collective of the NPU transport failed (a peer died or left the group)."""


class CollectiveTimeoutError(CollectiveError, TimeoutError):
    """A collective of the NPU transport did not complete within the buffer's timeout."""


class CollectiveExchange:
    def __init__(self, group, device: torch.device, timeout_s: float):
        self.group = group
        self.timeout_s = float(timeout_s)
        self.rank = group.rank()
        self.num_ranks = group.size()
        self.device = device
        self._staging: dict[str, torch.Tensor] = {}

    def gather_words(self, words: torch.Tensor) -> torch.Tensor:
        """Every rank's int32 ``words`` (same length on every rank) as a CPU ``[R, len]`` tensor."""
        words = words.to(device=self.device, dtype=torch.int32).contiguous()
        out = torch.empty(self.num_ranks * words.numel(), dtype=torch.int32, device=self.device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
        self._wait(gather(out, words, group=self.group, async_op=True), "the count exchange")
        return out.cpu().view(self.num_ranks, -1)

    def staging(self, name: str, rows: int, row_shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        """A persistent ``[rows, *row_shape]`` buffer (its contents are whatever the last use left)."""
        numel = rows
        for s in row_shape:
            numel *= s
        nbytes = max(1, numel * dtype.itemsize)
        buf = self._staging.get(name)
        if buf is None or buf.numel() < nbytes:
            buf = self._staging[name] = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        return buf[:numel * dtype.itemsize].view(dtype).view(rows, *row_shape)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, send_rows: list[int], recv_rows: list[int]) -> None:
        """Rows ``inp[:sum(send_rows)]`` go out in per-destination blocks; ``out[:sum(recv_rows)]``
        receives the blocks of every source in rank order. 1-byte types travel as bytes."""
        n_out, n_in = sum(recv_rows), sum(send_rows)
        width = math.prod(out.shape[1:])
        dst, src = out[:n_out].reshape(n_out, width), inp[:n_in].reshape(n_in, width)
        if dst.element_size() == 1:
            dst, src = dst.view(torch.uint8), src.view(torch.uint8)
        self._wait(dist.all_to_all_single(dst, src.contiguous(), output_split_sizes=recv_rows,
                                          input_split_sizes=send_rows, group=self.group, async_op=True),
                   "an all_to_all_single")

    def _wait(self, work, what: str) -> None:
        try:
            work.wait(timeout=timedelta(seconds=self.timeout_s))
        except RuntimeError as exc:
            if "timed out" in str(exc).lower() or "timeout" in str(exc).lower():
                raise CollectiveTimeoutError(f"deep_ep: {what} of rank {self.rank} timed out after {self.timeout_s:g} s "
                                             f"(a peer is late or gone): {exc}") from exc
            raise CollectiveError(f"deep_ep: {what} of rank {self.rank} failed (a peer died or left the group): "
                                  f"{exc}") from exc
