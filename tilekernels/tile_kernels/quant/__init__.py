"""Quantisation casts: FP8 E4M3, FP4 E2M1 (two per byte) and E5M6 with block scale factors."""
from .cast_ops import (
                       cast_back,
                       per_block_cast,
                       per_block_cast_with_precomputed_sf,
                       per_block_cast_with_sf_only,
                       per_channel_cast,
                       per_channel_cast_and_transpose,
                       per_channel_cast_fused,
                       per_token_cast,
                       per_token_cast_back,
                       per_token_cast_with_precomputed_sf,
                       per_token_cast_with_sf_only,
)
from .common import unpack_from_e2m1fn_x2
from .lossless import per_block_cast_lossless
from .swiglu import (
                       swiglu_backward_and_per_token_cast,
                       swiglu_forward_and_per_channel_cast_and_transpose,
                       swiglu_forward_and_per_token_cast,
)

__all__ = ["swiglu_forward_and_per_channel_cast_and_transpose", "per_channel_cast", "per_channel_cast_fused",
           "per_channel_cast_and_transpose", "swiglu_forward_and_per_token_cast", "swiglu_backward_and_per_token_cast",
           "unpack_from_e2m1fn_x2", "per_token_cast", "per_token_cast_with_precomputed_sf", "per_token_cast_with_sf_only",
           "per_block_cast", "per_block_cast_with_precomputed_sf", "per_block_cast_with_sf_only", "cast_back",
           "per_token_cast_back", "per_block_cast_lossless"]
