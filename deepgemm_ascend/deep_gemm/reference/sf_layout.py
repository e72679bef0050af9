"""Scale-factor layout transforms in plain PyTorch: each writes ``out`` (any strides) in place.

Row ``i`` of ``out`` takes input row ``i // gran_mn`` (one scale row per ``gran_mn`` rows)."""
from __future__ import annotations

import torch

from .. import formats


def _rows(sf: torch.Tensor, mn: int, gran_mn: int) -> torch.Tensor:
    if gran_mn == 1:
        return sf[..., :mn, :]
    return sf.index_select(-2, torch.arange(mn, device=sf.device) // gran_mn)


def sf_copy(sf: torch.Tensor, out: torch.Tensor, gran_mn: int) -> None:
    """FP32 ``sf [B?, ceil(MN/gran_mn), SK]`` into ``out [B?, MN, SK]``."""
    out.copy_(_rows(sf, out.size(-2), gran_mn))


def sf_pack_ue8m0(sf: torch.Tensor, out: torch.Tensor, gran_mn: int) -> None:
    """FP32 ``sf`` -> exponent bytes packed little-endian into int32 / int16 ``out [B?, MN, words]``."""
    out.copy_(formats.pack_ue8m0(_rows(sf, out.size(-2), gran_mn), out.dtype))


def sf_unpack_ue8m0(packed: torch.Tensor, out: torch.Tensor) -> None:
    """int32 / int16 packed UE8M0 ``[B?, MN, P]`` -> FP32 ``out [B?, MN, SK]``."""
    out.copy_(formats.unpack_ue8m0(packed)[..., :out.size(-1)])
