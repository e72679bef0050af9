"""Top-k selection and the DeepSeek router (scoring, bias, group-limited top-k, weight
normalisation, shared-expert slots, logical -> physical mapping, EP/TP masking)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

SCORING_FUNCS = ("sigmoid", "sqrtsoftplus", "softmax")
DUPLICATE_HASH = 23333  # spreads tokens over an expert's physical replicas


def stable_topk(scores: torch.Tensor, num_topk: int) -> torch.Tensor:
    """Indices of the ``num_topk`` largest scores per row, descending, ties -> smaller index."""
    return torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :num_topk].contiguous()


def topk_sum_and_topk_group_idx(scores: torch.Tensor, num_group_sum_topk: int, num_topk_groups: int) -> torch.Tensor:
    """``scores (T, G, E_g)``: rank groups by the sum of their ``num_group_sum_topk`` best scores."""
    group_scores = scores.topk(num_group_sum_topk, dim=-1).values.sum(-1)
    return stable_topk(group_scores, num_topk_groups)


def mask_by_ep_tp(idx: torch.Tensor, experts_per_rank: int, tp_rank: int, num_tp_ranks: int) -> torch.Tensor:
    """Keep experts of this TP rank and renumber them to the local numbering; others -> -1."""
    per_dp = experts_per_rank * num_tp_ranks
    valid = idx >= 0
    valid &= (idx // experts_per_rank) % num_tp_ranks == tp_rank
    local = idx - tp_rank * experts_per_rank
    local = local - (local // per_dp) * (per_dp - experts_per_rank)
    return torch.where(valid & (local >= 0), local, torch.full_like(idx, -1))


def scores_of(logits: torch.Tensor, scoring_func: str) -> torch.Tensor:
    if scoring_func == "sigmoid":
        return torch.sigmoid(logits)
    if scoring_func == "sqrtsoftplus":
        return F.softplus(logits).sqrt()
    return torch.softmax(logits, dim=-1)


def top2_sum_gate(logits: torch.Tensor, bias: torch.Tensor, num_topk: int, num_topk_groups: int, num_groups: int,
                  use_shared_as_routed: bool, num_shared_experts: int, routed_scaling_factor: float, ep_rank: int,
                  num_ep_ranks: int, tp_rank: int, num_tp_ranks: int, scoring_func: str,
                  mask: torch.Tensor | None = None, fix_routing_mask: torch.Tensor | None = None,
                  to_physical_map: torch.Tensor | None = None, logical_count: torch.Tensor | None = None,
                  unmapped_topk_idx: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    num_tokens, num_routed = logits.shape
    num_shared = num_shared_experts if use_shared_as_routed else 0
    width = num_topk + num_shared
    device = logits.device
    topk_idx = torch.full((num_tokens, width), -1, dtype=torch.int64, device=device)
    topk_weights = torch.zeros((num_tokens, width), dtype=torch.float32, device=device)
    active = mask if mask is not None else torch.ones(num_tokens, dtype=torch.bool, device=device)
    rows = active.nonzero().squeeze(1)
    if unmapped_topk_idx is not None and mask is not None:
        unmapped_topk_idx[~active] = -1
    if rows.numel() == 0:
        return topk_idx, topk_weights

    lg = logits[rows]
    scores = scores_of(lg, scoring_func)
    ranking = (lg if scoring_func == "softmax" else scores) + bias.unsqueeze(0)
    if num_groups != num_topk_groups:
        per_group = num_routed // num_groups
        keep = topk_sum_and_topk_group_idx(ranking.view(-1, num_groups, per_group), 2, num_topk_groups)
        dropped = torch.ones((rows.numel(), num_groups), dtype=torch.bool, device=device).scatter_(1, keep, False)
        ranking = ranking.masked_fill(dropped.repeat_interleave(per_group, 1), float("-inf"))
    selected = stable_topk(ranking, num_topk)
    if fix_routing_mask is not None and unmapped_topk_idx is not None:
        fixed = fix_routing_mask[rows]
        selected = torch.where(fixed.unsqueeze(1), unmapped_topk_idx[rows], selected)
    if unmapped_topk_idx is not None:
        unmapped_topk_idx[rows] = selected

    chosen = scores.gather(1, selected.clamp(min=0))
    weights = chosen / chosen.sum(-1, keepdim=True).clamp(min=1e-20) * routed_scaling_factor
    if num_shared > 0:
        shared = torch.arange(num_routed, num_routed + num_shared, device=device).expand(rows.numel(), -1)
        selected = torch.cat([selected, shared], 1)
        weights = torch.cat([weights, torch.ones((rows.numel(), num_shared), device=device)], 1)

    num_extra = 0
    if to_physical_map is not None:
        num_extra = to_physical_map.shape[1] - 1
        e = selected.clamp(min=0)
        replica = (ep_rank + rows.unsqueeze(1) * DUPLICATE_HASH) % logical_count[e].to(torch.int64)
        physical = to_physical_map[e, replica].to(torch.int64)
        selected = torch.where(selected >= 0, physical, selected)
    experts_per_rank = (num_routed + num_extra) // num_ep_ranks
    topk_idx[rows] = mask_by_ep_tp(selected, experts_per_rank, tp_rank, num_tp_ranks)
    topk_weights[rows] = weights
    return topk_idx, topk_weights
