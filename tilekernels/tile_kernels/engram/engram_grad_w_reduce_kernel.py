"""Upstream's ``tile_kernels.engram.engram_grad_w_reduce_kernel`` module path;
the op lives in ``tile_kernels.engram``."""
from . import grad_w_reduce

__all__ = ["grad_w_reduce"]
