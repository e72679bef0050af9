"""Upstream's ``tile_kernels.moe.inplace_unique_group_indices_kernel`` module path;
the op lives in ``tile_kernels.moe.layout``."""
from .layout import inplace_unique_group_indices

__all__ = ["inplace_unique_group_indices"]
