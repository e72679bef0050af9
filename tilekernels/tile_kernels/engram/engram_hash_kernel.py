"""Upstream's ``tile_kernels.engram.engram_hash_kernel`` module path; the op lives in ``tile_kernels.engram``."""
from . import engram_hash

__all__ = ["engram_hash"]
