"""Upstream's ``tile_kernels.torch``: the PyTorch reference implementations under upstream's names."""
from ..reference.cast import cast, cast_back, per_channel_cast_fused
from ..reference.cast_e5m6 import cast_back_from_e5m6, cast_to_e5m6
from ..reference.mhc import (
                             expand_to_mhc_ref,
                             mhc_head_compute_mix_ref,
                             mhc_post_ref,
                             mhc_pre_apply_mix_ref,
                             mhc_pre_norm_fn_ref,
                             mhc_pre_split_mixes_ref,
                             sinkhorn_normalize_ref,
)
from ..reference.moe import (
                             aux_fi,
                             expand_to_fused,
                             expand_to_fused_with_sf,
                             group_count,
                             inplace_unique_group_indices,
                             mask_indices_by_tp,
                             normalize_weight,
                             reduce_fused,
)
from ..reference.swiglu import swiglu_backward, swiglu_forward
from ..reference.topk import stable_topk, top2_sum_gate, topk_sum_and_topk_group_idx
from . import engram

__all__ = ["cast", "cast_back", "cast_to_e5m6", "cast_back_from_e5m6", "expand_to_fused", "expand_to_fused_with_sf",
           "expand_to_mhc_ref", "mhc_head_compute_mix_ref", "mhc_post_ref", "mhc_pre_apply_mix_ref",
           "mhc_pre_norm_fn_ref", "mhc_pre_split_mixes_ref", "sinkhorn_normalize_ref", "reduce_fused",
           "swiglu_forward", "swiglu_backward", "stable_topk", "topk_sum_and_topk_group_idx", "top2_sum_gate",
           "inplace_unique_group_indices", "aux_fi", "group_count", "mask_indices_by_tp", "normalize_weight",
           "per_channel_cast_fused", "engram"]
