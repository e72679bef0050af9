"""V2.1 AGRS sessions (all-gather; upstream left reduce-scatter unfinished) on an ``ElasticBuffer``.

A session hands out the start of the buffer's region front to back: each all-gather of a tensor
of ``n`` bytes takes the next ``align(R * n, 32)`` bytes, rank ``r``'s shard at ``r * n`` inside
them, and the gathered ``[R, *shape]`` result is a view of those bytes. ``agrs_get_inplace_tensor``
returns this rank's shard of the next slots, so a gather of it copies nothing locally. Offsets only
grow inside a session; ``destroy_agrs_session`` is a barrier, after which the next session starts
again at offset 0.

Over shared memory each rank copies its shard into its own region, the operation's handshake says
every shard is in place, and each rank then reads its peers' shards from their regions into its
own (every rank finished reading before any can start the next session). Across hosts the
shards go through ``dist.all_gather`` into a local area laid out the same way.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from deepjit import validation as V

from ..engine.session import CommSession
from ..utils.math import align

MAX_ALL_GATHERS_PER_SESSION = 32   # upstream's workspace holds this many arrival signals
_SIGNATURE = ("operation", "session", "slot", "tensor count", "session offset", "bytes per rank")


def shape_list(shapes) -> tuple[bool, list[tuple[int, ...]]]:
    """``(batched, shapes)``: ``shapes`` is one shape (a tuple or ``torch.Size`` of non-negative ints)
    or a non-empty sequence of them."""
    if not isinstance(shapes, (tuple, list, torch.Size)) or len(shapes) == 0:
        raise V.fail("shapes", "a shape tuple or a non-empty sequence of shape tuples",
                     repr(shapes) if isinstance(shapes, (tuple, list)) else type(shapes).__name__, TypeError)
    batched = isinstance(shapes[0], (tuple, list, torch.Size))
    out = []
    for i, shape in enumerate(shapes if batched else (shapes,)):
        name = f"shapes[{i}]" if batched else "shapes"
        if not isinstance(shape, (tuple, list, torch.Size)):
            raise V.fail(name, "a shape tuple", type(shape).__name__, TypeError)
        for d in shape:
            V.integer(f"{name} dims", d, lo=0)
        out.append(tuple(shape))
    return batched, out


def session_bytes(num_ranks: int, shapes, dtype: torch.dtype) -> int:
    """Bytes a session needs for gathering tensors of ``shapes`` (one shape or a sequence)."""
    if not isinstance(dtype, torch.dtype):
        raise V.fail("dtype", "a torch.dtype", type(dtype).__name__, TypeError)
    return sum(align(num_ranks * math.prod(s) * dtype.itemsize, 32) for s in shape_list(shapes)[1])


class AgrsSessions:
    def __init__(self, session: CommSession, num_region_bytes: int, num_max_session_bytes: int,
                 num_max_all_gathers: int):
        for name, value in (("num_max_session_bytes", num_max_session_bytes),
                            ("num_max_all_gathers_per_session", num_max_all_gathers)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise V.fail(name, "a positive int", repr(value))
        if num_max_session_bytes > num_region_bytes:
            raise V.fail("num_max_session_bytes", f"at most the buffer's {num_region_bytes} bytes (size the buffer with "
                         f"get_agrs_buffer_size_hint(...))", num_max_session_bytes)
        if num_max_all_gathers > MAX_ALL_GATHERS_PER_SESSION:
            raise V.fail("num_max_all_gathers_per_session", f"a value <= {MAX_ALL_GATHERS_PER_SESSION}",
                         num_max_all_gathers)
        self._session = session
        self.rank, self.num_ranks = session.rank, session.num_ranks
        self.num_max_session_bytes = align(num_max_session_bytes, 32)
        self.num_max_all_gathers = num_max_all_gathers
        self._shm = session.transport_kind == "shm"
        nbytes = min(self.num_max_session_bytes, num_region_bytes)
        if self._shm:
            self._areas = [session.transport.region(p, torch.uint8, (nbytes,)) for p in range(self.num_ranks)]
        else:
            self._areas = [torch.zeros(nbytes, dtype=torch.uint8)]
        self._mine = self._areas[self.rank if self._shm else 0]
        self._index = 0        # sessions started so far
        self._open = False
        self._offset = 0       # next free byte of the open session
        self._slot = 0         # all-gathers issued in the open session

    # ---- sessions ------------------------------------------------------------------------------
    def create(self) -> None:
        if self._open:
            raise RuntimeError("an AGRS session is already open; destroy_agrs_session() first")
        self._session.drain()
        self._open, self._offset, self._slot = True, 0, 0
        self._index += 1

    def destroy(self) -> None:
        """Collective: returns once every rank has finished with this session's buffer."""
        if not self._open:
            raise RuntimeError("no AGRS session is open; create_agrs_session() first")
        self._open = False
        self._session.start("destroy_agrs_session", ("operation", "session"), lambda: [21, self._index])

    def _check_open(self, what: str) -> None:
        if not self._open:
            raise RuntimeError(f"{what} needs an open AGRS session (create_agrs_session() or agrs_new_session())")

    def _room(self, offset: int, nbytes: int) -> None:
        if offset + align(nbytes * self.num_ranks, 32) > self.num_max_session_bytes \
                or self._slot >= self.num_max_all_gathers:
            raise RuntimeError(f"AGRS session is full ({self.num_max_session_bytes} bytes, "
                               f"{self.num_max_all_gathers} all-gathers per session): destroy the session and start "
                               f"a new one, or raise agrs_set_config(...)")

    # ---- tensors -------------------------------------------------------------------------------
    def inplace_tensors(self, num_bytes_list: list[int]) -> list[torch.Tensor]:
        """This rank's shards of the next slots, as uint8 views (the caller views them)."""
        self._check_open("agrs_get_inplace_tensor")
        out, offset = [], self._offset
        for nbytes in num_bytes_list:
            self._room(offset, nbytes)
            start = offset + nbytes * self.rank
            out.append(self._mine[start:start + nbytes])
            offset += align(nbytes * self.num_ranks, 32)
        return out

    def all_gather(self, tensors: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], Callable[[], None]]:
        self._check_open("all_gather")
        R, rank = self.num_ranks, self.rank
        base = self._mine.data_ptr()
        plan = []   # (tensor, slot offset, bytes per rank)
        offset = self._offset
        for t in tensors:   # the same on every rank when the ranks agree: refused before the handshake
            if isinstance(t, torch.Tensor):
                self._room(offset, t.numel() * t.element_size())
                offset += align(t.numel() * t.element_size() * R, 32)

        def check():
            if not tensors:
                raise V.fail("t", "a tensor or a non-empty sequence of tensors", "an empty sequence")
            offset = self._offset
            for i, t in enumerate(tensors):
                if not isinstance(t, torch.Tensor):
                    raise V.fail(f"t[{i}]", "a tensor", type(t).__name__, TypeError)
                if t.device.type != "cpu" or not t.is_contiguous():
                    raise V.fail(f"t[{i}]", "a contiguous CPU tensor", f"device {t.device}, shape {tuple(t.shape)}, strides {t.stride()}")
                nbytes = t.numel() * t.element_size()
                where = t.data_ptr() - base
                if 0 <= where < self.num_max_session_bytes and where != offset + nbytes * rank:
                    raise V.fail(f"t[{i}]", "a tensor outside the AGRS buffer or this rank's shard of the next slot (take it "
                                 "from agrs_get_inplace_tensor in the same order)",
                                 f"byte {where} of the buffer, the shard being at {offset + nbytes * rank}")
                plan.append((t, offset, nbytes))
                offset += align(nbytes * R, 32)
            for t, off, nbytes in plan:   # this rank's shards into place before the handshake says so
                shard = self._mine[off + nbytes * rank: off + nbytes * (rank + 1)]
                if shard.data_ptr() != t.data_ptr():
                    shard.copy_(t.reshape(-1).view(torch.uint8))
            return [22, self._index, self._slot, len(plan), self._offset, sum(n for _, _, n in plan)]

        self._session.start("all_gather", _SIGNATURE, check)
        self._session.guard(lambda: self._move(plan))
        self._offset = plan[-1][1] + align(plan[-1][2] * R, 32)
        self._slot += 1
        index = self._index
        out = [self._mine[off: off + nbytes * R].view(t.dtype).view(R, *t.shape) for t, off, nbytes in plan]

        def handle() -> None:
            # The data is in place when all_gather returns; the handle keeps upstream's rule that
            # results are read inside their session (the next session reuses the bytes).
            if not self._open or index != self._index:
                raise RuntimeError("AGRS handle waited after its session was destroyed")
        return out, handle

    def _move(self, plan) -> None:
        R, rank = self.num_ranks, self.rank
        for _, off, nbytes in plan:
            if self._shm:
                for p in range(R):
                    if p != rank:
                        span = slice(off + nbytes * p, off + nbytes * (p + 1))
                        self._mine[span].copy_(self._areas[p][span])
            else:
                parts = [self._mine[off + nbytes * p: off + nbytes * (p + 1)] for p in range(R)]
                mine = parts[rank].clone()
                dist.all_gather(parts, mine, group=self._session.group)
