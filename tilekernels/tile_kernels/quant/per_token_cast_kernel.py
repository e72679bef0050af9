"""Upstream's ``tile_kernels.quant.per_token_cast_kernel`` module path;
the op lives in ``tile_kernels.quant.cast_ops``."""
from .cast_ops import per_token_cast, per_token_cast_with_precomputed_sf, per_token_cast_with_sf_only

__all__ = ["per_token_cast", "per_token_cast_with_sf_only", "per_token_cast_with_precomputed_sf"]
