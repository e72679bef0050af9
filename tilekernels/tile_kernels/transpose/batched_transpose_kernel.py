"""Upstream's ``tile_kernels.transpose.batched_transpose_kernel`` module path;
the op lives in ``tile_kernels.transpose``."""
from . import batched_transpose, transpose

__all__ = ["transpose", "batched_transpose"]
