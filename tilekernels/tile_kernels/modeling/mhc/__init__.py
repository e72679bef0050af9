from .functional import expand_from_embedding, mhc_head, mhc_pre

__all__ = ["expand_from_embedding", "mhc_head", "mhc_pre"]
