"""Launching tile_kernels' TileLang Ascend kernels through deepjit.

Each kernel module has a builder returning a PrimFunc per static shape (``functools.cache`` keeps it).
``KernelLibrary.tilelang_kernel`` takes its lowering from deepjit's disk cache when there (no TileLang
import) and compiles it with the Ascend toolchain for NPU tensors, on deepjit's Ascend CPU twin for CPU
tensors."""
from __future__ import annotations

import torch


def launch(builder, args: tuple, *tensors: torch.Tensor) -> None:
    """Runs the kernel ``builder(*args)`` builds with ``tensors`` (contiguous, in the PrimFunc's parameter
    order) as global memory."""
    from .._lib import LIB

    LIB.tilelang_kernel(builder, *args).launch(None, *tensors)
