"""Several hosts: shared memory between the ranks of one host, collectives between hosts.

Every rank still has one region of ``R`` blocks (indexed by group rank); blocks from ranks on the
same host are written there through the host's symmetric window, blocks from other hosts travel
through ``all_to_all_single`` (with zero-sized splits for same-host pairs). The handshake and the
count exchange are collectives over the whole group.
"""
from __future__ import annotations

import torch

from deepjit.symm import SymmetricWindow, SymmetricWindowError

from .dist import DistTransport

CTRL_BYTES = 4096


class HybridTransport(DistTransport):
    kind = "hybrid"

    def __init__(self, group, num_bytes: int, timeout_s: float):
        super().__init__(group, torch.device("cpu"))
        self.window = SymmetricWindow.create(group, CTRL_BYTES + num_bytes, name_hint="deep_ep", prefault=False,
                                             num_signals=group.size(), timeout_s=timeout_s)
        self.local = {g: i for i, g in enumerate(self.window.local_ranks)}
        self.is_local = torch.tensor([r in self.local for r in range(self.num_ranks)])
        self._region = {g: self.window.data_ptr(i) + CTRL_BYTES for g, i in self.local.items()}
        self._seq = 0

    def begin(self, seq: int, signature: list[int], error: str | None, counts: torch.Tensor | None = None):
        self._seq = seq
        return super().begin(seq, signature, error)

    def _remote(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.where(self.is_local, 0, rows.long())

    def send_bases(self, send_rows, row_bytes: int, offset: int, block_stride: int) -> torch.Tensor:
        bases = super().send_bases(self._remote(send_rows), row_bytes, offset, block_stride)
        for d in self.local:
            bases[d] = self._region[d] + offset + self.rank * block_stride
        return bases

    def finish_send(self, send_rows, recv_rows, row_bytes: int) -> None:
        self.window.notify_lanes(0, self._seq)
        super().finish_send(self._remote(send_rows), self._remote(recv_rows), row_bytes)

    def recv_bases(self, recv_rows, row_bytes: int, offset: int, block_stride: int) -> torch.Tensor:
        self.window.wait_lanes(0, self._seq, what=f"deep_ep operation {self._seq}: waiting for same-host data")
        bases = super().recv_bases(self._remote(recv_rows), row_bytes, offset, block_stride)
        for s in self.local:
            bases[s] = self._region[self.rank] + offset + s * block_stride
        return bases

    def abort(self) -> None:
        try:
            self.window.abort()
        except SymmetricWindowError:
            pass

    def destroy(self) -> None:
        super().destroy()
        self.window.destroy()


class AllRemote:
    """The hybrid transport with every block routed through the collectives (for layouts that
    need each source's block compact, i.e. combine without multiple reduction)."""

    def __init__(self, transport: HybridTransport):
        self.transport = transport

    def send_bases(self, *args):
        return DistTransport.send_bases(self.transport, *args)

    def finish_send(self, *args):
        return DistTransport.finish_send(self.transport, *args)

    def recv_bases(self, *args):
        return DistTransport.recv_bases(self.transport, *args)
