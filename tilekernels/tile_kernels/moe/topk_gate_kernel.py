"""Upstream's ``tile_kernels.moe.topk_gate_kernel`` module path; the op lives in ``tile_kernels.moe.routing``."""
from .routing import topk_gate

__all__ = ["topk_gate"]
