"""Upstream's ``tile_kernels.moe.group_count_kernel`` module path; the op lives in ``tile_kernels.moe.layout``."""
from .layout import group_count

__all__ = ["group_count"]
