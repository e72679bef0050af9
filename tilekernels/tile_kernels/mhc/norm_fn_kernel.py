"""Upstream's ``tile_kernels.mhc.norm_fn_kernel`` entry points that callers use outside the kernels:
``round_to_tf32``. Upstream feeds ``fn`` (and the backward's ``out_mul_grad``) to TF32 MMAs after this
rounding; the CPU path multiplies in FP32, so it reads the TF32 value itself (``tf32_operand``)."""
from __future__ import annotations

import torch

_TF32_DROPPED_BITS = 13     # FP32 keeps 23 mantissa bits, TF32 10

__all__ = ["round_to_tf32"]


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """FP32 ``x`` plus half a TF32 unit in the last place, as upstream (the MMA then drops the low bits)."""
    return (x.contiguous().view(torch.int32) + (1 << (_TF32_DROPPED_BITS - 1))).view(torch.float32)


def tf32_operand(x: torch.Tensor) -> torch.Tensor:
    """The TF32 value a TF32 MMA reads from ``round_to_tf32(x)``: nearest, ties away from zero."""
    return (round_to_tf32(x).view(torch.int32) & -(1 << _TF32_DROPPED_BITS)).view(torch.float32)
