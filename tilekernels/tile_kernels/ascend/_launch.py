"""Launching tile_kernels' TileLang Ascend kernels through deepjit.

Each kernel module builds a PrimFunc per static shape (``functools.lru_cache`` keeps it; deepjit's
cache keeps the compiled kernel). CPU tensors run on deepjit's Ascend CPU twin."""
from __future__ import annotations

import torch


def launch(prim_func, *tensors: torch.Tensor) -> None:
    """Runs ``prim_func`` with ``tensors`` (contiguous, in the PrimFunc's parameter order) as global memory."""
    from deepjit.tilelang_route import run_on_twin

    if any(t.device.type != "cpu" for t in tensors):
        raise NotImplementedError("tile_kernels' Ascend kernels run on CPU tensors through the twin until "
                                  "deepjit's KernelLibrary.ascend_kernel launches them on NPUs")
    run_on_twin(prim_func, *tensors)
