from ..reference.moe import reduce_fused

__all__ = ["reduce_fused"]
