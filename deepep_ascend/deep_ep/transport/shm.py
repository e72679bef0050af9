"""Intra-host transport over a ``deepjit.symm.SymmetricWindow``.

Each rank's window data region holds a control block (the handshake signature and an error
message, two copies used by alternate operations: a rank that has moved on to operation s+1 must
not overwrite what a slower peer is still reading for operation s; and the dispatch count block
``[R sources, R destinations, C]``, written by each source together with its handshake, so one
signal round carries both) and then the operation region: for dispatch ``[R count rows][R blocks of M slots]``,
one block per source rank, for combine ``[R blocks of M rows]`` (or ``[M, K]`` rows without
multiple reduction). After the operation region comes the output arena: dispatch outputs are
allocated there when it has room, the receiver publishes where they are, and senders write tokens
straight into them (no receive-side copy); combine outputs are allocated there too (from the top),
so results the caller keeps never push an operation onto freshly faulted memory; an output block
is reused once the caller has dropped every view of it. Senders write straight into the destination's memory; signal lanes order it:

    POSTED  (lane base 0)   rank r reached operation seq s and has finished with every earlier
                            operation, so its region may be overwritten for s
    COUNTS  (lane base R)   rank r's count row for s is in place
    ARRIVED (lane base 2R)  rank r's data for s is in place
    LAYOUT  (lane base 3R)  rank r has published where its outputs for s are (or that it has none)
"""
from __future__ import annotations

import torch

from deepjit.symm import SymmetricWindow, SymmetricWindowError

SIG_WORDS = 32
MSG_BYTES = 1536
LAYOUT_WORDS = 32
LAYOUT_OFFSET = 2 * SIG_WORDS * 8 + 2 * MSG_BYTES
CTRL_COUNTS_OFFSET = 4096
CTRL_COUNTS_BYTES = 32768   # count blocks larger than this go through the operation region instead
CTRL_BYTES = CTRL_COUNTS_OFFSET + CTRL_COUNTS_BYTES


class ShmTransport:
    kind = "shm"

    def __init__(self, group, num_bytes: int, timeout_s: float, arena_bytes: int = 0):
        self.group = group
        self.rank = group.rank()
        self.num_ranks = group.size()
        # Memory now for the operation region and one region's worth of arena (what one call's
        # outputs need at most): about 2 x num_bytes. Arena blocks beyond that, used only while the
        # caller keeps earlier results, get memory when first handed out. Pages are faulted in on
        # first use, not here: only the pages operations touch cost their first-touch fault (a
        # prefaulted 1 GiB buffer took ~20 s to build on a 2-core VM).
        self.window = SymmetricWindow.create(group, CTRL_BYTES + num_bytes + arena_bytes, name_hint="deep_ep",
                                             num_signals=4 * self.num_ranks, timeout_s=timeout_s,
                                             reserve_bytes=CTRL_BYTES + num_bytes + min(arena_bytes, num_bytes),
                                             prefault=False)
        if self.window.num_local_ranks != self.num_ranks:
            raise RuntimeError("shared-memory transport needs every rank of the group on this host")
        self.region_bytes = num_bytes
        R = self.num_ranks
        self._sig = [[self.window.tensor(p, torch.int64, (SIG_WORDS,), i * SIG_WORDS * 8) for p in range(R)]
                     for i in range(2)]
        self._msg = [[self.window.tensor(p, torch.uint8, (MSG_BYTES,), 2 * SIG_WORDS * 8 + i * MSG_BYTES)
                      for p in range(R)] for i in range(2)]
        self._region_ptr = [self.window.data_ptr(p) + CTRL_BYTES for p in range(R)]
        self._layout = [[self.window.tensor(p, torch.int64, (LAYOUT_WORDS,), LAYOUT_OFFSET + i * LAYOUT_WORDS * 8)
                         for p in range(R)] for i in range(2)]
        self.arena_offset = CTRL_BYTES + num_bytes
        self.arena_bytes = arena_bytes
        self._arena: list[tuple[int, torch.Tensor]] = []   # (offset, block) handed out as outputs
        self._seq = 0
        self._counts_shape = None
        self._early_counts = None

    # ---- handshake ---------------------------------------------------------------------------
    def begin(self, seq: int, signature: list[int], error: str | None,
              counts: torch.Tensor | None = None) -> list[list[int]]:
        """With ``counts`` (a dispatch's ``[R, C]`` count rows) they are posted before this rank's
        handshake signal, so ``recv_counts`` needs no signal round of its own. A single copy is
        enough: a peer reads its counts before it sends its data, and this rank started operation
        ``seq`` only after receiving every peer's data of its previous dispatch."""
        self._seq = seq
        self._early_counts = None
        if counts is not None and counts.numel() * self.num_ranks * 4 <= CTRL_COUNTS_BYTES:
            R, C = counts.shape
            for d in range(R):
                self.window.tensor(d, torch.int32, (R, R, C), CTRL_COUNTS_OFFSET)[self.rank].copy_(counts)
            self._early_counts = (R, R, C)
        copy = seq % 2
        sig = torch.tensor(signature + [0] * (SIG_WORDS - len(signature)), dtype=torch.int64)
        sig[SIG_WORDS - 1] = 1 if error else 0
        self._sig[copy][self.rank].copy_(sig)
        if error:
            self.post_message(seq, error)
        self.window.notify_lanes(0, seq)
        self.window.wait_lanes(0, seq, what=f"deep_ep operation {seq}: waiting for every rank to start it")
        rows = [s.tolist() for s in self._sig[copy]]
        return [(row[: len(signature)], self._message(copy, p) if row[SIG_WORDS - 1] else None)
                for p, row in enumerate(rows)]

    def post_message(self, seq: int, error: str) -> None:
        """This rank's error text for operation ``seq``, read by peers once its signal says so."""
        raw = error.encode()[: MSG_BYTES - 1]
        msg = self._msg[seq % 2][self.rank]
        msg[: len(raw)].copy_(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
        msg[len(raw)] = 0

    def message(self, seq: int, peer: int) -> str:
        return self._message(seq % 2, peer)

    def _message(self, copy: int, peer: int) -> str:
        raw = bytes(self._msg[copy][peer].tolist())
        return raw.split(b"\0", 1)[0].decode(errors="replace")

    # ---- data --------------------------------------------------------------------------------
    def region(self, peer: int, dtype: torch.dtype, shape, offset: int = 0) -> torch.Tensor:
        return self.window.tensor(peer, dtype, shape, CTRL_BYTES + offset)

    def region_address(self, peer: int) -> int:
        return self._region_ptr[peer]

    def post_counts(self, counts: torch.Tensor) -> None:
        """``counts [R, C]`` int32 (per destination): every rank gets the whole matrix, as row
        ``rank`` of its ``[R sources, R destinations, C]`` count block, so a sender can work out
        where its tokens land in every destination's outputs."""
        R, C = counts.shape
        self._counts_shape = (R, R, C)
        if self._early_counts == self._counts_shape:
            return  # posted with the handshake
        for d in range(R):
            self.region(d, torch.int32, (R, R, C))[self.rank].copy_(counts)
        self.window.notify_lanes(R, self._seq)

    def recv_counts(self) -> torch.Tensor:
        """``[R sources, R destinations, C]``: every rank's count rows."""
        R = self.num_ranks
        if self._early_counts == self._counts_shape:
            return self.window.tensor(self.rank, torch.int32, self._counts_shape, CTRL_COUNTS_OFFSET).clone()
        self.window.wait_lanes(R, self._seq, what=f"deep_ep operation {self._seq}: waiting for count rows")
        return self.region(self.rank, torch.int32, self._counts_shape).clone()

    # ---- output arena and direct writes --------------------------------------------------------
    def arena_alloc(self, nbytes: int, from_top: bool = False) -> torch.Tensor | None:
        """A block of this rank's arena (own storage) no caller view still uses, or None when full.
        Dispatch outputs are placed lowest first, combine outputs (``from_top``) highest first, so
        the two kinds do not split each other's free space."""
        # At least one page: a rank that receives nothing still gets a real block, so its empty
        # outputs have arena addresses the senders can be told.
        nbytes = max(4096, (nbytes + 4095) // 4096 * 4096)
        live = sorted(((off, block) for off, block in self._arena
                       if torch._C._storage_Use_Count(block.untyped_storage()._cdata) > 2), key=lambda e: e[0])
        ends = [0] + [off + block.numel() for off, block in live]
        gaps = [(start, stop) for start, stop in zip(ends, [off for off, _ in live] + [self.arena_bytes], strict=True)
                if stop - start >= nbytes]
        self._arena = live
        if not gaps:
            return None
        start = gaps[-1][1] - nbytes if from_top else gaps[0][0]
        if not self.window.commit(self.arena_offset + start, nbytes):
            return None  # no room left on the mount: the caller falls back to private memory
        fresh = self.window.own_tensor(self.arena_offset + start, nbytes)
        self._arena.append((start, fresh))
        return fresh

    def arena_address(self, peer: int) -> int:
        return self._region_ptr[peer] - CTRL_BYTES + self.arena_offset

    def arena_offset_of(self, t: torch.Tensor) -> int:
        return t.data_ptr() - self.arena_address(self.rank)

    def publish_layout(self, words: list[int]) -> None:
        row = torch.full((LAYOUT_WORDS,), -1, dtype=torch.int64)
        row[: len(words)] = torch.tensor(words, dtype=torch.int64)
        self._layout[self._seq % 2][self.rank].copy_(row)
        self.window.notify_lanes(3 * self.num_ranks, self._seq)

    def peer_layouts(self) -> torch.Tensor:
        self.window.wait_lanes(3 * self.num_ranks, self._seq,
                               what=f"deep_ep operation {self._seq}: waiting for output layouts")
        return torch.stack([t.clone() for t in self._layout[self._seq % 2]])

    def send_bases(self, send_rows: torch.Tensor, row_bytes: int, offset: int, block_stride: int) -> torch.Tensor:
        return torch.tensor([self._region_ptr[d] + offset + self.rank * block_stride for d in range(self.num_ranks)],
                            dtype=torch.int64)

    def finish_send(self, send_rows: torch.Tensor, recv_rows: torch.Tensor, row_bytes: int) -> None:
        self.window.notify_lanes(2 * self.num_ranks, self._seq)

    def recv_bases(self, recv_rows: torch.Tensor, row_bytes: int, offset: int, block_stride: int) -> torch.Tensor:
        self.window.wait_lanes(2 * self.num_ranks, self._seq, what=f"deep_ep operation {self._seq}: waiting for data")
        base = self._region_ptr[self.rank] + offset
        return torch.tensor([base + s * block_stride for s in range(self.num_ranks)], dtype=torch.int64)

    def abort(self) -> None:
        try:
            self.window.abort()
        except SymmetricWindowError:
            pass

    def destroy(self) -> None:
        self._sig = self._msg = self._layout = []
        self._arena = []
        self.window.destroy()
