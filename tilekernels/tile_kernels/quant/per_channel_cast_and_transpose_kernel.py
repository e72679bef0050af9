"""Upstream's ``tile_kernels.quant.per_channel_cast_and_transpose_kernel`` module path;
the op lives in ``tile_kernels.quant.cast_ops``."""
from .cast_ops import per_channel_cast_and_transpose

__all__ = ["per_channel_cast_and_transpose"]
