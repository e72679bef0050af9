"""``BufferAllocator``: plan tensors before the buffer exists, then materialise them as views of
the buffer's storage. Every rank must plan identical shapes in identical order."""
from __future__ import annotations

import torch

from deepjit import validation as V

from ..engine.layout import ALLOCATION_ALIGNMENT
from ..utils.math import align


class BufferAllocator:
    def __init__(self):
        self._planned: list[tuple[torch.Tensor, int]] = []
        self.num_bytes = 0
        self.materialized = False

    def allocate(self, shape, dtype: torch.dtype) -> torch.Tensor:
        if self.materialized:
            raise RuntimeError("BufferAllocator.allocate after materialize()")
        placeholder = torch.empty(tuple(shape), dtype=dtype, device="meta")
        offset = align(self.num_bytes, ALLOCATION_ALIGNMENT)
        self.num_bytes = offset + placeholder.numel() * placeholder.element_size()
        self._planned.append((placeholder, offset))
        return placeholder

    def materialize(self, storage: torch.Tensor) -> None:
        """Swap every placeholder for a view of ``storage`` (a uint8 tensor of at least num_bytes)."""
        if self.materialized:
            raise RuntimeError("BufferAllocator.materialize called twice")
        if storage.dtype != torch.uint8 or storage.numel() < self.num_bytes:
            raise V.fail("storage", f"uint8 with at least {self.num_bytes} bytes", f"{storage.dtype} with {storage.numel()}")
        for placeholder, offset in self._planned:
            nbytes = placeholder.numel() * placeholder.element_size()
            view = storage[offset:offset + nbytes].view(placeholder.dtype).view(placeholder.shape)
            torch.utils.swap_tensors(placeholder, view)
        self.materialized = True
