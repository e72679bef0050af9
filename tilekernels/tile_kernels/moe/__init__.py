"""MoE routing: top-k gates, the DeepSeek router, counting and the expert-major layout."""
from .layout import (
                     aux_fi,
                     expand_to_fused,
                     expand_to_fused_with_sf,
                     get_fused_mapping,
                     group_count,
                     inplace_unique_group_indices,
                     mask_indices_by_tp,
                     normalize_weight,
                     reduce_fused,
)
from .routing import top2_sum_gate, topk_gate, topk_sum_and_topk_group_idx
from .scoring import ScoringFunc
from .topk_gate_forward import moe_topk_gate, moe_topk_gate_forward

__all__ = ["get_fused_mapping", "reduce_fused", "expand_to_fused", "expand_to_fused_with_sf",
           "inplace_unique_group_indices", "aux_fi", "group_count", "mask_indices_by_tp", "normalize_weight",
           "top2_sum_gate", "topk_gate", "topk_sum_and_topk_group_idx", "ScoringFunc",
           "moe_topk_gate_forward", "moe_topk_gate"]
