"""Upstream's ``tile_kernels.quant.swiglu_forward_and_per_token_cast_kernel`` module path;
the op lives in ``tile_kernels.quant.swiglu``."""
from .swiglu import swiglu_forward_and_per_token_cast

__all__ = ["swiglu_forward_and_per_token_cast"]
