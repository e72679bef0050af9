"""Upstream's ``tile_kernels.moe.expand_to_fused_kernel`` module path; the op lives in ``tile_kernels.moe.layout``."""
from .layout import expand_to_fused, expand_to_fused_with_sf

__all__ = ["expand_to_fused", "expand_to_fused_with_sf"]
