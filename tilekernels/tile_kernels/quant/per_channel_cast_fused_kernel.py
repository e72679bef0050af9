"""Upstream's ``tile_kernels.quant.per_channel_cast_fused_kernel`` module path;
the op lives in ``tile_kernels.quant.cast_ops``."""
from .cast_ops import per_channel_cast_fused

__all__ = ["per_channel_cast_fused"]
