"""Unbalanced routing generators of upstream's ``deep_ep.utils.gate`` (its tests route with them):
rank 0 receives about ``ratio`` times the tokens of every other rank. Tensors are made on
``device`` (default: torch's default device; upstream's are CUDA-only)."""
from __future__ import annotations

import torch

__all__ = ["generate_rank_count", "generate_topk_idx", "get_precise_unbalanced_scores", "get_random_unbalanced_scores",
           "get_scores_by_factor", "get_unbalanced_scores", "map_unbalanced_ratio_to_factor"]


def generate_topk_idx(rank_count: torch.Tensor, num_tokens: int, num_experts: int, num_ranks: int,
                      num_topk: int) -> torch.Tensor:
    """``[num_tokens, num_topk]`` expert ids: for token t, ``rank_count[t, r]`` distinct random
    experts of rank r, ranks in order."""
    if tuple(rank_count.shape) != (num_tokens, num_ranks) or bool((rank_count.sum(1) != num_topk).any()):
        raise ValueError(f"rank_count must be [{num_tokens}, {num_ranks}] with rows summing to {num_topk}")
    per_rank = num_experts // num_ranks
    dev = rank_count.device
    experts = torch.arange(num_experts, device=dev).view(1, num_ranks, per_rank).expand(num_tokens, -1, -1)
    shuffled = torch.gather(experts, 2, torch.argsort(torch.rand(num_tokens, num_ranks, per_rank, device=dev), -1))
    keep = torch.arange(per_rank, device=dev).view(1, 1, -1) < rank_count.unsqueeze(2)
    return shuffled[keep].view(num_tokens, num_topk)


def generate_rank_count(num_tokens: int, num_experts: int, num_ranks: int, num_topk: int, ratio: float,
                        device=None) -> torch.Tensor:
    """``[num_tokens, num_ranks]`` int32: how many of each token's top-k experts live on each rank.
    Each token touches as many ranks as a random top-k would (capped so the ratio is reachable);
    rank 0 is among them for ``ratio / (num_ranks - 1 + ratio)`` of all (token, rank) pairs."""
    if ratio < 1.0:
        raise ValueError(f"ratio must be >= 1, got {ratio}")
    per_rank = num_experts // num_ranks
    scores = torch.rand(num_tokens, num_experts, device=device)
    ranks = torch.topk(scores, num_topk, dim=1).indices // per_rank
    touched = torch.zeros(num_tokens, num_ranks, dtype=torch.bool, device=device).scatter_(1, ranks, True).sum(1)
    touched = touched.clamp(max=int((num_ranks - 1) / ratio) + 1)
    special = int(round(int(touched.sum()) * ratio / (num_ranks - 1 + ratio)))
    must = touched == num_ranks
    optional = (~must).nonzero().squeeze(1)
    optional = optional[torch.randperm(optional.numel(), device=device)][:max(0, special - int(must.sum()))]
    has_special = must.clone()
    has_special[optional] = True
    # The other ranks: a random choice of ranks 1.. per token.
    others = torch.argsort(torch.rand(num_tokens, num_ranks - 1, device=device), 1) + 1
    n_others = touched - has_special.int()
    chosen = torch.zeros(num_tokens, num_ranks, dtype=torch.bool, device=device)
    chosen[:, 0] = has_special
    pick = torch.arange(num_ranks - 1, device=device)[None, :] < n_others[:, None]
    chosen.scatter_(1, others, pick)
    # Top-k slots dealt round-robin over the chosen ranks (each at most per_rank).
    slot_rank = torch.cumsum(chosen.int(), 1) - 1
    n = chosen.sum(1, keepdim=True).clamp(min=1)
    count = torch.where(chosen, num_topk // n + (slot_rank < num_topk % n).int(), 0)
    if bool((count > per_rank).any()):
        raise ValueError(f"num_topk={num_topk} does not fit the {per_rank} experts per rank at ratio {ratio}")
    return count.int()


def get_precise_unbalanced_scores(num_tokens: int, num_experts: int, num_ranks: int, num_topk: int, ratio: float,
                                  device=None) -> torch.Tensor:
    """Scores whose top-k follows ``generate_rank_count`` exactly (a synthetic, not a real, load)."""
    rank_count = generate_rank_count(num_tokens, num_experts, num_ranks, num_topk, ratio, device)
    threshold = 0.9
    scores = torch.rand(num_tokens, num_experts, device=device) * threshold
    topk_idx = generate_topk_idx(rank_count, num_tokens, num_experts, num_ranks, num_topk)
    high = threshold + 1e-6 + torch.rand(num_tokens, num_topk, device=device) * (1 - threshold - 1e-6)
    scores.scatter_(1, topk_idx, high)
    return scores


def get_scores_by_factor(num_tokens: int, num_experts: int, num_ranks: int, factor: float,
                         device=None) -> torch.Tensor:
    """Uniform scores, those of rank 0's experts scaled up to ``[0, factor)``."""
    scores = torch.rand(num_tokens, num_experts, device=device)
    scores[:, : num_experts // num_ranks] *= factor
    return scores


def map_unbalanced_ratio_to_factor(num_tokens: int, num_experts: int, num_ranks: int, num_topk: int, ratio: float,
                                   device=None) -> float:
    """The ``get_scores_by_factor`` factor giving rank 0 about ``ratio`` times the tokens of the
    average other rank (bisection over [1, 100])."""
    low, high = 1.0, 100.0
    per_rank = num_experts // num_ranks
    for _ in range(20):
        mid = (low + high) / 2
        topk = torch.topk(get_scores_by_factor(num_tokens, num_experts, num_ranks, mid, device), num_topk, -1).indices
        hits = torch.zeros(num_tokens, num_ranks, dtype=torch.bool, device=device).scatter_(1, topk // per_rank, True)
        counts = hits.sum(0).float()
        if float(counts[0]) > float(counts[1:].mean()) * ratio:
            high = mid
        else:
            low = mid
    return low


def get_random_unbalanced_scores(num_tokens: int, num_experts: int, num_ranks: int, num_topk: int, ratio: float,
                                 device=None) -> torch.Tensor:
    factor = 1.0 if ratio == 1.0 else map_unbalanced_ratio_to_factor(num_tokens, num_experts, num_ranks, num_topk,
                                                                     ratio, device)
    return get_scores_by_factor(num_tokens, num_experts, num_ranks, factor, device)


def get_unbalanced_scores(num_tokens: int, num_experts: int, num_ranks: int, num_topk: int, ratio: float,
                          precise: bool, device=None) -> torch.Tensor:
    fn = get_precise_unbalanced_scores if precise else get_random_unbalanced_scores
    return fn(num_tokens, num_experts, num_ranks, num_topk, ratio, device)
