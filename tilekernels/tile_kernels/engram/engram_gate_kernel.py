"""Upstream's ``tile_kernels.engram.engram_gate_kernel`` module path; the op lives in ``tile_kernels.engram``."""
from . import engram_gate_bwd, engram_gate_fwd

__all__ = ["engram_gate_fwd", "engram_gate_bwd"]
