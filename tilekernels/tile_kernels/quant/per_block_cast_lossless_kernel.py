"""Upstream's ``tile_kernels.quant.per_block_cast_lossless_kernel`` module path;
the op lives in ``tile_kernels.quant.lossless``."""
from .lossless import per_block_cast_lossless

__all__ = ["per_block_cast_lossless"]
