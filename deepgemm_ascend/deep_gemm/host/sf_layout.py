"""Scale-factor layout transforms at memory speed."""
from __future__ import annotations

from typing import Optional

import torch


def transpose_sf(sf: torch.Tensor, out: torch.Tensor, gran_mn: int = 1, num_threads: Optional[int] = None) -> None:
    """Copy FP32 ``sf [B?, ceil(MN/gran_mn), SK]`` into ``out [B?, MN, SK]`` (any strides, e.g. MN-major
    TMA-aligned), row i taking input row ``i // gran_mn``."""
    raise NotImplementedError


def pack_sf_ue8m0(sf: torch.Tensor, out: torch.Tensor, gran_mn: int = 1, num_threads: Optional[int] = None) -> None:
    """FP32 ``sf [B?, ceil(MN/gran_mn), SK]`` -> exponent bytes packed little-endian into ``out``:
    int32 ``[B?, MN, ceil(SK/4)]`` (NVIDIA) or int16 ``[B?, MN, ceil(SK/2)]`` (Ascend), any strides;
    row i takes input row ``i // gran_mn``; bytes past SK are 0."""
    raise NotImplementedError


def unpack_sf_ue8m0(packed: torch.Tensor, out: torch.Tensor, num_threads: Optional[int] = None) -> None:
    """int32/int16 packed UE8M0 ``[B?, MN, P]`` -> FP32 ``out [B?, MN, SK]`` (``SK <= P * bytes``)."""
    raise NotImplementedError
