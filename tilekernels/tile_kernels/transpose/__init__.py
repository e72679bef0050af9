"""Transposes of the last two dimensions for any element type (tiled host kernel on CPU; a TileLang
kernel on Ascend for 1-, 2- and 4-byte elements)."""
from __future__ import annotations

import torch

from deepjit import Impl
from deepjit import validation as C

from .._dispatch import TABLE
from .._lib import empty, host_kernel, threads
from ..ascend import transpose as ascend
from ..reference import transpose as ref


def batched_transpose(x: torch.Tensor) -> torch.Tensor:
    """``x (B, M, N)`` (unit column stride, row stride any multiple of 4) -> contiguous ``(B, N, M)``."""
    C.tensor("x", x, ndim=3, last_stride_one=True)
    if x.element_size() not in (1, 2, 4, 8):
        raise C.fail("x", "an element size of 1, 2, 4 or 8 bytes", f"{x.element_size()} bytes ({x.dtype})", TypeError)
    return TABLE.run("batched_transpose", x.device, x)


def _batched_transpose_host(x: torch.Tensor) -> torch.Tensor:
    b, m, n = x.shape
    out = empty(b, n, m, dtype=x.dtype)
    if out.numel():
        host_kernel("tk_transpose", "transpose.cpp")(out, x, b, m, n, x.stride(0), x.stride(1), x.element_size(),
                                                     threads())
    return out


def transpose_host(x: torch.Tensor) -> torch.Tensor:
    """The host kernel's ``x.T.contiguous()`` of a 2-D ``x`` (for the ops that transpose their output)."""
    return _batched_transpose_host(x.unsqueeze(0)).squeeze(0)


TABLE.register("batched_transpose", reference=ref.batched_transpose, host=_batched_transpose_host,
               ascend=Impl(ascend.batched_transpose, "1-, 2- and 4-byte elements (FP8, BF16, FP32, ...); a strided x "
                                                     "is made contiguous first; 8-byte elements take the reference",
                           ascend.accepts))


def transpose(x: torch.Tensor) -> torch.Tensor:
    """2-D ``x (M, N)`` -> contiguous ``(N, M)``."""
    C.tensor("x", x, ndim=2, last_stride_one=True)
    return batched_transpose(x.unsqueeze(0)).squeeze(0)
