"""Upstream's ``tile_kernels.moe.normalize_weight_kernel`` module path; the op lives in ``tile_kernels.moe.layout``."""
from .layout import normalize_weight

__all__ = ["normalize_weight"]
