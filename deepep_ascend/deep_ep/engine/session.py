"""``CommSession``: the sequencing every buffer operation goes through.

- every collective operation gets the next sequence number and starts with a handshake in which
  each rank posts a signature (what it is about to do) or the error its local checks raised; a
  local error, or any difference between ranks, raises on every rank before a byte moves;
- operations never overlap on the shared region: a new one first finishes the previous one
  (waits for the background worker, runs a deferred epilogue that was not waited on yet);
- a communication failure (timeout, dead peer, collective error) aborts the peers' waits and
  leaves the session broken: every later call raises until the buffer is recreated.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch
import torch.distributed as dist

from .. import _dispatch, _lib
from ..transport import choose_transport
from ..transport.dist import DistTransport


class BufferBrokenError(RuntimeError):
    pass


class Deferred:
    """An epilogue that runs once, either when waited on or when the next operation needs the region."""

    def __init__(self, fn: Callable):
        self._fn = fn
        self._done = False
        self._result = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def run(self):
        with self._lock:
            if not self._done:
                self._done = True
                try:
                    self._result = self._fn()
                except BaseException as exc:
                    self._error = exc
            self._fn = None
        if self._error is not None:
            raise self._error
        return self._result


class CommSession:
    def __init__(self, group, region_bytes: int, timeout_s: float, device: torch.device | None = None,
                 arena_bytes: int = 0):
        self.group = group
        self.rank = group.rank()
        self.num_ranks = group.size()
        if device is None:  # an HCCL group carries NPU tensors; anything else here is CPU
            device = torch.device("npu" if dist.get_backend(group) == "hccl" else "cpu")
        self.device = device
        self.timeout_s = timeout_s
        self.backend = _dispatch.TABLE.backend("dispatch_combine", device)
        kind = choose_transport(group, device.type, self.backend == "host")
        if kind == "shm":
            from ..transport.shm import ShmTransport
            self.transport = ShmTransport(group, region_bytes, timeout_s, arena_bytes)
        elif kind == "hybrid":
            from ..transport.hybrid import HybridTransport
            self.transport = HybridTransport(group, region_bytes, timeout_s)
        else:
            self.transport = DistTransport(group, device)
        # Ranks sharing this host share its cores.
        window = getattr(self.transport, "window", None)
        self.threads = _lib.threads_per_rank(window.num_local_ranks if window is not None else 1)
        self._seq = 0
        self._last_own_handshake = 0
        self._worker: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        self._deferred: list[Deferred] = []
        self.broken: BaseException | None = None

    @property
    def transport_kind(self) -> str:
        return self.transport.kind

    # ---- sequencing --------------------------------------------------------------------------
    def drain(self) -> None:
        pending, self._pending = self._pending, []
        deferred, self._deferred = self._deferred, []
        for f in pending:
            self.guard(f.result)
        for d in deferred:
            try:
                self.guard(d.run)
            except BaseException:
                pass  # reported to whoever waits on that epilogue; the break is recorded

    def start(self, op: str, names: tuple, check: Callable[[], list], counts: Callable | None = None):
        """Run ``check()`` (local validation; returns the signature values, named by ``names``),
        then the handshake, which also carries ``counts()`` (a dispatch's count rows) where the
        transport can. Returns ``check``'s result list on success; raises on every rank otherwise."""
        if self.broken is not None:
            raise BufferBrokenError(f"deep_ep: the buffer is unusable after an earlier communication failure "
                                    f"({self.broken}); destroy it and create a new one")
        self.drain()
        self._seq += 1
        error, signature = None, [0] * len(names)
        try:
            signature = check()
        except (ValueError, TypeError) as exc:
            error = exc
        early = counts() if counts is not None and error is None else None
        rows = self.guard(lambda: self.transport.begin(self._seq, [int(v) for v in signature], str(error) if error
                                                       else None, early))
        if error is not None:
            raise error
        for peer, (_, msg) in enumerate(rows):
            if msg is not None:
                raise ValueError(f"deep_ep {op}: rank {peer} rejected its arguments: {msg}")
        for peer, (sig, _) in enumerate(rows):
            if list(sig) != [int(v) for v in signature]:
                diff = ", ".join(f"{n}: rank {self.rank} has {a}, rank {peer} has {b}"
                                 for n, a, b in zip(names, signature, sig, strict=False) if int(a) != int(b))
                raise ValueError(f"deep_ep {op}: ranks disagree on a collective argument ({diff})")
        return signature

    def start_own_handshake(self) -> tuple[int, bool]:
        """For an operation whose kernel does its own handshake (the low-latency kernels): its
        sequence number, and whether the previous operation was one too. Only then may the kernel
        write into its peers' regions before its first round: a peer may still be reading its
        region for an earlier operation of another kind."""
        if self.broken is not None:
            raise BufferBrokenError(f"deep_ep: the buffer is unusable after an earlier communication failure "
                                    f"({self.broken}); destroy it and create a new one")
        self.drain()
        self._seq += 1
        follows_own = self._seq == 1 or self._last_own_handshake == self._seq - 1
        self._last_own_handshake = self._seq
        return self._seq, follows_own

    def guard(self, fn: Callable):
        try:
            return fn()
        except (ValueError, TypeError):
            raise
        except BaseException as exc:
            if self.broken is None:
                self.broken = exc
                self.transport.abort()
            raise

    # ---- asynchronous work -------------------------------------------------------------------
    def submit(self, fn: Callable) -> Future:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deep_ep-comm")
        future = self._worker.submit(self.guard, _in_callers_modes(fn))
        self._pending.append(future)
        return future

    def defer(self, fn: Callable) -> Deferred:
        run = _in_callers_modes(fn)
        d = Deferred(lambda: self.guard(run))
        self._deferred.append(d)
        return d

    def destroy(self) -> None:
        try:
            self.drain()
        except BaseException:
            pass
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None
        self.transport.destroy()


def _in_callers_modes(fn: Callable) -> Callable:
    """``fn`` run under the grad and inference modes of the thread that issued it: they are
    thread-local, and an epilogue that writes into the caller's (inference) tensors on the worker
    thread, or later, must see the caller's modes."""
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

    def run():
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return fn()
    return run
