from ..reference.cast import per_channel_cast_fused

__all__ = ["per_channel_cast_fused"]
