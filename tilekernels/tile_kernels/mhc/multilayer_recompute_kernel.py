"""Upstream's ``tile_kernels.mhc.multilayer_recompute_kernel`` module path;
the op lives in ``tile_kernels.modeling.mhc.ops.multilayer_recompute``."""
from ..modeling.mhc.ops.multilayer_recompute import mhc_multilayer_recompute

__all__ = ["mhc_multilayer_recompute"]
