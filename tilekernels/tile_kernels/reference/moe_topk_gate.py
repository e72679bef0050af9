"""The DeepSeek-V4.1 router (TileKernels 2.x ``moe_topk_gate_forward``), written with torch ops.

Per token (one row of ``logits``), in the order the upstream kernel decides:
1. ``mask[t]`` False: not routed (ids -1, weights 0, ``unmapped_topk_idx`` -1, ``scores`` row 0);
2. ``force_random[t]``: distinct random physical experts with random weights in [0, 1), ``unmapped_topk_idx``
   -1, ``scores`` row 0 (the random stream is torch's, seeded by ``ep_rank`` and the token, not curand's);
3. otherwise scores ``sqrt(softplus(logits))`` (softplus the identity above 20), ranked with ``bias`` (or
   ``image_bias`` for image tokens) added, lowest expert first on ties -- or, with ``fix_routing_mask[t]``,
   the experts already in ``unmapped_topk_idx``; weights are the unbiased scores over their sum plus 1e-20,
   times ``routed_scaling_factor``; shared experts follow as slots of weight 1; every slot then maps to a
   physical replica ``to_physical_map[e, (ep_rank + t * 23333) % logical_count[e]]``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .topk import DUPLICATE_HASH


def _random_rows(rows: torch.Tensor, width: int, num_physical: int, ep_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct random ids in [0, num_physical) and weights in [0, 1) for each token of ``rows``."""
    ids = torch.empty((rows.numel(), width), dtype=torch.int64)
    weights = torch.empty((rows.numel(), width), dtype=torch.float32)
    for i, token in enumerate(rows.tolist()):
        gen = torch.Generator().manual_seed(ep_rank * 1_000_003 + token)
        ids[i] = torch.randperm(num_physical, generator=gen)[:width]
        weights[i] = torch.rand(width, generator=gen)
    return ids, weights


def moe_topk_gate_forward(logits, num_topk, num_shared_experts, routed_scaling_factor, ep_rank, mask, bias,
                          image_bias, image_token_mask, fix_routing_mask, to_physical_map, logical_count,
                          unmapped_topk_idx, force_random, topk_idx, topk_weights, scores) -> None:
    """Writes ``topk_idx``/``topk_weights`` ``[T, num_topk + S]`` and, when given, ``unmapped_topk_idx``
    ``[T, num_topk]`` and ``scores`` ``[T, E]`` (``num_shared_experts`` already 0 unless shared slots are routed)."""
    num_tokens, num_experts = logits.shape
    device = logits.device
    routed = torch.ones(num_tokens, dtype=torch.bool, device=device) if mask is None else mask.clone()
    forced = torch.zeros_like(routed) if force_random is None else force_random & routed
    routed &= ~forced

    unbiased = F.softplus(logits.float()).sqrt()
    ranking_bias = torch.zeros(num_experts, device=device) if bias is None else bias
    if image_token_mask is not None:
        ranking = unbiased + torch.where(image_token_mask[:, None], image_bias[None, :], ranking_bias[None, :])
    else:
        ranking = unbiased + ranking_bias
    chosen = torch.sort(ranking, dim=1, descending=True, stable=True).indices[:, :num_topk]
    if fix_routing_mask is not None:
        chosen = torch.where(fix_routing_mask[:, None], unmapped_topk_idx.to(torch.int64), chosen)
    chosen_scores = unbiased.gather(1, chosen.clamp(min=0))
    weights = chosen_scores / (chosen_scores.sum(-1, keepdim=True) + 1e-20) * routed_scaling_factor
    ids = chosen
    if num_shared_experts:
        shared = torch.arange(num_experts, num_experts + num_shared_experts, device=device)
        ids = torch.cat([ids, shared.expand(num_tokens, -1)], dim=1)
        weights = torch.cat([weights, torch.ones(num_tokens, num_shared_experts, device=device)], dim=1)
    logical = ids
    if to_physical_map is not None:
        token = torch.arange(num_tokens, device=device, dtype=torch.int64)[:, None]
        replica = (ep_rank + token * DUPLICATE_HASH) % logical_count.to(torch.int64)[logical]
        ids = to_physical_map.to(torch.int64)[logical, replica]

    topk_idx.copy_(torch.where(routed[:, None], ids, -1))
    topk_weights.copy_(torch.where(routed[:, None], weights, 0.0))
    if unmapped_topk_idx is not None:
        unmapped_topk_idx.copy_(torch.where(routed[:, None], chosen, -1))
    if scores is not None:
        scores.copy_(torch.where(routed[:, None], unbiased, 0.0))
    if forced.any():
        rows = forced.nonzero().flatten()
        num_physical = int(logical_count.sum()) if logical_count is not None else num_experts + num_shared_experts
        rand_ids, rand_weights = _random_rows(rows.cpu(), topk_idx.shape[1], num_physical, ep_rank)
        topk_idx[rows] = rand_ids.to(device)
        topk_weights[rows] = rand_weights.to(device)
