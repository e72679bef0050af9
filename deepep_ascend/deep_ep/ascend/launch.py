"""Launching deep_ep's TileLang Ascend kernels through deepjit: the Ascend toolchain for NPU tensors,
the Ascend CPU twin for CPU tensors (``EP_BACKEND=ascend``). Each kernel module builds one PrimFunc
per row size, position count and flags (``functools.cache``; the row counts are symbolic, read off the
tensors at launch); deepjit caches its lowering (a warm process never imports TileLang) and the compiled
kernel."""
from __future__ import annotations

import math

import torch


def launch(builder, args: tuple, *tensors: torch.Tensor) -> None:
    """Runs the kernel ``builder(*args)`` builds with ``tensors`` (contiguous, in the PrimFunc's parameter
    order) as global memory."""
    from .._lib import LIB

    LIB.tilelang_kernel(builder, *args).launch(None, *tensors)


def row_bytes(t: torch.Tensor) -> int:
    """Bytes of one row (dimension 0) of ``t``."""
    return math.prod(t.shape[1:]) * t.element_size()
