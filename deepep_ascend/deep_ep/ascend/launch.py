"""Launching deep_ep's TileLang Ascend kernels through deepjit: the Ascend toolchain for NPU tensors,
the Ascend CPU twin for CPU tensors (``EP_BACKEND=ascend``). Each kernel module builds one PrimFunc
per static shape (``functools.cache``); deepjit caches the compiled kernel."""
from __future__ import annotations

import math

import torch


def launch(prim_func, *tensors: torch.Tensor) -> None:
    """Runs ``prim_func`` with ``tensors`` (contiguous, in the PrimFunc's parameter order) as global memory."""
    from ..jit import LIB

    LIB.ascend_kernel(prim_func.attrs["global_symbol"], prim_func).launch(None, *tensors)


def row_bytes(t: torch.Tensor) -> int:
    """Bytes of one row (dimension 0) of ``t``."""
    return math.prod(t.shape[1:]) * t.element_size()
