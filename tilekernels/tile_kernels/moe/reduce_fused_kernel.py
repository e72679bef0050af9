"""Upstream's ``tile_kernels.moe.reduce_fused_kernel`` module path; the op lives in ``tile_kernels.moe.layout``."""
from .layout import reduce_fused

__all__ = ["reduce_fused"]
