"""Upstream's ``tile_kernels.moe.topk_sum_and_topk_group_idx_kernel`` module path;
the op lives in ``tile_kernels.moe.routing``."""
from .routing import topk_sum_and_topk_group_idx

__all__ = ["topk_sum_and_topk_group_idx"]
