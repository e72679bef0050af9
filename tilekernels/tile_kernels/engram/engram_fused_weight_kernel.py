"""Upstream's ``tile_kernels.engram.engram_fused_weight_kernel`` module path;
the op lives in ``tile_kernels.engram``."""
from . import fused_weight

__all__ = ["fused_weight"]
