"""Math, quantisers, scale-factor layouts and distributed helpers (star-imported by ``deep_gemm``)."""
from .math import (align, cast_back_from_fp4, ceil_div, ceil_to_ue8m0, pack_ue8m0_to_int, pack_ue8m0_to_short,  # noqa: I001
                   per_block_cast_to_fp8, per_channel_cast_to_fp8, per_custom_dims_cast_to_fp8, per_token_cast_to_fp4,
                   per_token_cast_to_fp8, transpose_packed_fp4, unpack_ue8m0_from_int, unpack_ue8m0_from_short)
from .layout import *  # noqa: F401,F403
from . import dist  # noqa: F401
from .dist import init_dist, uneven_all_gather  # noqa: F401  (upstream re-exports them here)

__all__ = ["align", "cast_back_from_fp4", "ceil_div", "ceil_to_ue8m0", "pack_ue8m0_to_int", "pack_ue8m0_to_short",
           "per_block_cast_to_fp8", "per_channel_cast_to_fp8", "per_custom_dims_cast_to_fp8", "per_token_cast_to_fp4",
           "per_token_cast_to_fp8", "transpose_packed_fp4", "unpack_ue8m0_from_int", "unpack_ue8m0_from_short"]
from .layout import __all__ as _layout_all  # noqa: E402

__all__ += _layout_all
