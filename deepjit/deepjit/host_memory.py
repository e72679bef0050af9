"""Host output buffers for memory-bound kernels.

A fresh multi-megabyte CPU tensor costs a page fault per 4 KiB page on first touch (the OS zeroes
each page), which for a memory-bound kernel can cost as much as the kernel itself. Two remedies:
asking for transparent huge pages before the first touch (Linux THP in "madvise" or "always" mode)
cuts the number of faults by 512, and an ``OutputPool`` hands a released buffer out again, already
faulted in, the way a GPU caching allocator does. Elsewhere this is a plain ``torch.empty``.
"""
from __future__ import annotations

import ctypes
import threading

import torch

HUGE_PAGE_BYTES = 1 << 21
MIN_ADVISED_BYTES = 4 * HUGE_PAGE_BYTES
_MADV_HUGEPAGE = 14


def _load_madvise():
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_madvise = _load_madvise()


def advise_huge_pages(t: torch.Tensor) -> None:
    """Asks for huge pages over the whole 2 MiB pages inside ``t``'s storage (best effort)."""
    nbytes = t.untyped_storage().nbytes()
    if _madvise is None or t.device.type != "cpu" or nbytes < MIN_ADVISED_BYTES:
        return
    base = t.untyped_storage().data_ptr()
    start = (base + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1)
    end = (base + nbytes) & ~(HUGE_PAGE_BYTES - 1)
    if end > start:
        _madvise(start, end - start, _MADV_HUGEPAGE)


def empty_host(*shape, dtype: torch.dtype) -> torch.Tensor:
    """``torch.empty`` on the CPU for a kernel's output, huge pages requested when it is large."""
    t = torch.empty(*shape, dtype=dtype)
    advise_huge_pages(t)
    return t


MIN_POOLED_BYTES = 1 << 20
MAX_POOLED_ENTRIES = 12
MAX_IDLE_BYTES = 1 << 30


def _in_use(t: torch.Tensor) -> bool:
    # The pool's tensor and the temporary storage object account for two references.
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata) > 2


class OutputPool:
    """Large host outputs whose buffers are reused once the caller has released them.

    A buffer is handed out again only when no tensor but the pool's own references its storage,
    i.e. the caller has dropped every output view of it. Reused buffers hold stale bytes: kernels
    that take their output from here must write every element. Small requests are plain
    ``torch.empty``. Released buffers are given back, oldest first, while the pool tracks more than
    ``MAX_POOLED_ENTRIES`` buffers or its released ones exceed ``MAX_IDLE_BYTES`` in all. Buffers a
    caller still holds are not given back, so the caps bound released memory only.
    The in-use test reads the storage's reference count (``torch._C._storage_Use_Count``).
    Thread-safe: the choice of a buffer and the caller's view of it are made under one lock, since
    until that view exists the buffer looks released to every other thread.
    """

    def __init__(self):
        self._entries: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def empty(self, shape, dtype: torch.dtype) -> torch.Tensor:
        nbytes = dtype.itemsize
        for s in shape:
            nbytes *= s
        if nbytes < MIN_POOLED_BYTES:
            return torch.empty(tuple(shape), dtype=dtype)
        with self._lock:
            return self._take(nbytes)[:nbytes].view(dtype).view(tuple(shape))

    def _take(self, nbytes: int) -> torch.Tensor:
        best = None
        for e in self._entries:
            if nbytes <= e.numel() <= 2 * nbytes and not _in_use(e) and (best is None or e.numel() < best.numel()):
                best = e
        if best is not None:
            return best
        raw = torch.empty(nbytes, dtype=torch.uint8)
        advise_huge_pages(raw)
        self._entries.append(raw)
        self._trim()
        return raw

    def _trim(self) -> None:
        idle = [e for e in self._entries[:-1] if not _in_use(e)]
        idle_bytes = sum(e.numel() for e in idle)
        for e in idle:  # oldest first
            if len(self._entries) <= MAX_POOLED_ENTRIES and idle_bytes <= MAX_IDLE_BYTES:
                break
            # by identity: list.remove would compare tensors element-wise
            del self._entries[next(i for i, x in enumerate(self._entries) if x is e)]
            idle_bytes -= e.numel()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
