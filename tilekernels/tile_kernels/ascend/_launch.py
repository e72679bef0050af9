"""Launching tile_kernels' TileLang Ascend kernels through deepjit.

Each kernel module builds a PrimFunc per static shape (``functools.lru_cache`` keeps it; deepjit's
cache keeps the compiled kernel). ``KernelLibrary.ascend_kernel`` compiles it with the Ascend toolchain
for NPU tensors and runs it on deepjit's Ascend CPU twin for CPU tensors."""
from __future__ import annotations

import torch


def launch(prim_func, *tensors: torch.Tensor) -> None:
    """Runs ``prim_func`` with ``tensors`` (contiguous, in the PrimFunc's parameter order) as global memory."""
    from .._lib import LIB

    LIB.ascend_kernel(prim_func.attrs["global_symbol"], prim_func).launch(None, *tensors)
