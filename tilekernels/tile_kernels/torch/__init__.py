"""Upstream's ``tile_kernels.torch``: the PyTorch reference implementations under upstream's names and
module paths (each submodule re-exports from ``tile_kernels.reference``)."""
from . import engram
from .cast import cast, cast_back
from .cast_e5m6 import cast_back_from_e5m6, cast_to_e5m6
from .expand_to_fused import expand_to_fused, expand_to_fused_with_sf
from .mhc import (
                  expand_to_mhc_ref,
                  mhc_head_compute_mix_ref,
                  mhc_post_ref,
                  mhc_pre_apply_mix_ref,
                  mhc_pre_norm_fn_ref,
                  mhc_pre_split_mixes_ref,
                  sinkhorn_normalize_ref,
)
from .moe import aux_fi, group_count, inplace_unique_group_indices, mask_indices_by_tp, normalize_weight
from .per_channel_cast_fused import per_channel_cast_fused
from .reduce_fused import reduce_fused
from .swiglu import swiglu_backward, swiglu_forward
from .topk import moe_topk_gate_forward, stable_topk, top2_sum_gate, topk_sum_and_topk_group_idx

__all__ = ["cast", "cast_back", "cast_to_e5m6", "cast_back_from_e5m6", "expand_to_fused", "expand_to_fused_with_sf",
           "expand_to_mhc_ref", "mhc_head_compute_mix_ref", "mhc_post_ref", "mhc_pre_apply_mix_ref",
           "mhc_pre_norm_fn_ref", "mhc_pre_split_mixes_ref", "sinkhorn_normalize_ref", "reduce_fused",
           "swiglu_forward", "swiglu_backward", "stable_topk", "moe_topk_gate_forward", "topk_sum_and_topk_group_idx", "top2_sum_gate",
           "inplace_unique_group_indices", "aux_fi", "group_count", "mask_indices_by_tp", "normalize_weight",
           "per_channel_cast_fused", "engram"]
