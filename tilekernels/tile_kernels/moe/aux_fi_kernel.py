"""Upstream's ``tile_kernels.moe.aux_fi_kernel`` module path; the op lives in ``tile_kernels.moe.layout``."""
from .layout import aux_fi

__all__ = ["aux_fi"]
