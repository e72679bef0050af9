"""Upstream's ``tile_kernels.moe.top2_sum_gate_kernel`` module path; the op lives in ``tile_kernels.moe.routing``."""
from .routing import top2_sum_gate

__all__ = ["top2_sum_gate"]
