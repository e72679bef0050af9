"""Upstream's ``tile_kernels.moe.mask_indices_by_tp_kernel`` module path;
the op lives in ``tile_kernels.moe.layout``."""
from .layout import mask_indices_by_tp

__all__ = ["mask_indices_by_tp"]
