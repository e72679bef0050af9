"""Reuse of large output buffers the caller has released.

A fresh multi-megabyte CPU tensor costs a page fault per 4 KiB on first touch (the kernel zeroes
every page), which here costs as much as the copy that fills it. The pool keeps a few byte
buffers; one is handed out again only once no tensor but the pool's own references its storage,
i.e. the caller has dropped every output view of it. New buffers ask for transparent huge pages.
"""
from __future__ import annotations

import torch

from deepjit.host_memory import advise_huge_pages

MIN_POOLED_BYTES = 1 << 20
MAX_ENTRIES = 12


def _in_use(t: torch.Tensor) -> bool:
    # The pool's tensor and the temporary storage object account for two references.
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata) > 2


class OutputPool:
    def __init__(self):
        self._entries: list[torch.Tensor] = []

    def empty(self, shape, dtype: torch.dtype) -> torch.Tensor:
        numel = 1
        for s in shape:
            numel *= s
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if nbytes < MIN_POOLED_BYTES:
            return torch.empty(tuple(shape), dtype=dtype)
        raw = self._take(nbytes)
        return raw[:nbytes].view(dtype).view(tuple(shape))

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
        if len(self._entries) > MAX_ENTRIES:
            free = [e for e in self._entries if not _in_use(e)]
            if free:
                self._entries.remove(free[0])
        return raw

    def clear(self) -> None:
        self._entries.clear()
