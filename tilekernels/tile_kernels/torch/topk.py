import torch

from ..reference import moe_topk_gate as _gate
from ..reference.moe_topk_gate import sqrt_softplus as sqrt_softplus_ref
from ..reference.topk import stable_topk, top2_sum_gate, topk_sum_and_topk_group_idx

__all__ = ["sqrt_softplus_ref", "stable_topk", "topk_sum_and_topk_group_idx", "top2_sum_gate", "moe_topk_gate_forward"]


def moe_topk_gate_forward(logits, num_topk, use_shared_as_routed, num_shared_experts, routed_scaling_factor, ep_rank,
                          scoring_func, mask=None, bias=None, image_bias=None, image_token_mask=None,
                          fix_routing_mask=None, to_physical_map=None, logical_count=None, unmapped_topk_idx=None,
                          out=None):
    """Upstream's PyTorch oracle signature over ``tile_kernels.reference.moe_topk_gate``."""
    if scoring_func != "sqrtsoftplus":
        raise ValueError(f"scoring_func: expected 'sqrtsoftplus', got {scoring_func!r}")
    shared = num_shared_experts if use_shared_as_routed else 0
    width = num_topk + shared
    if out is None:
        out = (torch.empty((logits.shape[0], width), dtype=torch.int64, device=logits.device),
               torch.empty((logits.shape[0], width), dtype=torch.float32, device=logits.device))
    if logits.shape[0]:
        _gate.moe_topk_gate_forward(logits, num_topk, shared, routed_scaling_factor, ep_rank, mask, bias, image_bias,
                                    image_token_mask, fix_routing_mask, to_physical_map, logical_count,
                                    unmapped_topk_idx, None, out[0], out[1], None)
    return out
