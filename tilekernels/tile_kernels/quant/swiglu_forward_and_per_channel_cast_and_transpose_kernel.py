"""Upstream's ``tile_kernels.quant.swiglu_forward_and_per_channel_cast_and_transpose_kernel`` module path;
the op lives in ``tile_kernels.quant.swiglu``."""
from .swiglu import swiglu_forward_and_per_channel_cast_and_transpose

__all__ = ["swiglu_forward_and_per_channel_cast_and_transpose"]
