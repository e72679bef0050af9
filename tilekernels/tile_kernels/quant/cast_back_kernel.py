"""Upstream's ``tile_kernels.quant.cast_back_kernel`` module path; the op lives in ``tile_kernels.quant.cast_ops``."""
from .cast_ops import cast_back, per_token_cast_back

__all__ = ["cast_back", "per_token_cast_back"]
