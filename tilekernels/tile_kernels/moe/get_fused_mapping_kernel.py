"""Upstream's ``tile_kernels.moe.get_fused_mapping_kernel`` module path; the op lives in ``tile_kernels.moe.layout``."""
from .layout import get_fused_mapping

__all__ = ["get_fused_mapping"]
