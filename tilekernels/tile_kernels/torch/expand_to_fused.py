from ..reference.moe import expand_to_fused, expand_to_fused_with_sf

__all__ = ["expand_to_fused", "expand_to_fused_with_sf"]
