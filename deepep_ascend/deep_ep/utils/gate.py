"""Unbalanced routing generators of upstream's ``deep_ep.utils.gate`` (its tests route with them):
rank 0 receives about ``ratio`` times the tokens of every other rank. Tensors are made on
``device`` (default: torch's default device; upstream's are CUDA-only)."""
from __future__ import annotations

import torch

from deepjit import validation as V

__all__ = ["generate_rank_count", "generate_topk_idx", "get_precise_unbalanced_scores", "get_random_unbalanced_scores",
           "get_scores_by_factor", "get_unbalanced_scores", "map_unbalanced_ratio_to_factor"]


def generate_topk_idx(rank_count: torch.Tensor, num_tokens: int, num_experts: int, num_ranks: int,
                      num_topk: int) -> torch.Tensor:
    """``[num_tokens, num_topk]`` expert ids: for token t, ``rank_count[t, r]`` distinct random
    experts of rank r, ranks in order."""
    if tuple(rank_count.shape) != (num_tokens, num_ranks) or bool((rank_count.sum(1) != num_topk).any()):
        raise V.fail("rank_count", f"shape ({num_tokens}, {num_ranks}) with rows summing to num_topk ({num_topk})",
                     f"shape {tuple(rank_count.shape)}" if tuple(rank_count.shape) != (num_tokens, num_ranks)
                     else f"row sums {sorted(set(rank_count.sum(1).tolist()))}")
    per_rank = num_experts // num_ranks
    dev = rank_count.device
    experts = torch.arange(num_experts, device=dev).view(1, num_ranks, per_rank).expand(num_tokens, -1, -1)
    shuffled = torch.gather(experts, 2, torch.argsort(torch.rand(num_tokens, num_ranks, per_rank, dtype=torch.float32, device=dev), -1))
    keep = torch.arange(per_rank, device=dev).view(1, 1, -1) < rank_count.unsqueeze(2)
    return shuffled[keep].view(num_tokens, num_topk)


def generate_rank_count(num_tokens: int, num_experts: int, num_ranks: int, num_topk: int, ratio: float,
                        device=None) -> torch.Tensor:
    """``[num_tokens, num_ranks]`` int32: how many of each token's top-k experts live on each rank.
    Each token touches as many ranks as a random top-k would (capped so the ratio is reachable);
    rank 0 (the special rank) is among them for about ``ratio`` times as many tokens as each other
    rank, and the other ranks are touched equally often, to within one token."""
    if ratio < 1.0:
        raise V.fail("ratio", "a value >= 1", ratio)
    per_rank, normal_ranks = num_experts // num_ranks, num_ranks - 1
    scores = torch.rand(num_tokens, num_experts, dtype=torch.float32, device=device)
    ranks = torch.topk(scores, num_topk, dim=1).indices // per_rank
    touched = torch.zeros(num_tokens, num_ranks, dtype=torch.bool, device=device).scatter_(1, ranks, True).sum(1)
    touched = touched.clamp(max=int(normal_ranks / ratio) + 1)
    # How many tokens touch the special rank: each normal rank's share times the ratio, at least
    # the tokens that touch every rank.
    total = int(touched.sum())
    normal_share = int(total / (normal_ranks + ratio))
    special = min(total - normal_share * normal_ranks, int(normal_share * ratio) + 1)
    must = touched == num_ranks
    special = max(special, int(must.sum()))
    optional = (~must).nonzero().squeeze(1)
    optional = optional[torch.randperm(optional.numel(), device=device)][:special - int(must.sum())]
    has_special = must.clone()
    has_special[optional] = True
    # The normal ranks are dealt from one cycle over a random order of ranks 1..R-1 that runs on
    # from token to token: every normal rank is dealt within one token of the others, and a token's
    # normal ranks (at most R-1 consecutive entries of the cycle) are distinct.
    n_normal = touched - has_special.long()
    first = torch.cumsum(n_normal, 0) - n_normal
    cycle = torch.randperm(normal_ranks, device=device) + 1 if normal_ranks else torch.zeros(1, dtype=torch.long)
    step = torch.arange(max(normal_ranks, 1), device=device)
    dealt = cycle[(first[:, None] + step[None, :]) % max(normal_ranks, 1)]        # [T, R-1]
    # Top-k slots dealt round-robin over the token's ranks in dealing order (special rank first).
    order = step[None, :] + has_special.long()[:, None]                          # position of each dealt rank
    n = touched[:, None]
    share = torch.where(step[None, :] < n_normal[:, None], num_topk // n + (order < num_topk % n).long(), 0)
    count = torch.zeros(num_tokens, num_ranks, dtype=torch.long, device=device)
    if normal_ranks:
        count.scatter_add_(1, dealt, share)
    count[:, 0] = torch.where(has_special, num_topk // touched + (num_topk % touched > 0).long(), 0)
    if bool((count > per_rank).any()):
        raise V.fail("num_topk", f"a count that fits the {per_rank} experts per rank at ratio {ratio}", num_topk)
    return count[torch.randperm(num_tokens, device=device)].int()


def get_precise_unbalanced_scores(num_tokens: int, num_experts: int, num_ranks: int, num_topk: int, ratio: float,
                                  device=None) -> torch.Tensor:
    """Scores whose top-k follows ``generate_rank_count`` exactly (a synthetic, not a real, load)."""
    rank_count = generate_rank_count(num_tokens, num_experts, num_ranks, num_topk, ratio, device)
    threshold = 0.9
    scores = torch.rand(num_tokens, num_experts, dtype=torch.float32, device=device) * threshold
    topk_idx = generate_topk_idx(rank_count, num_tokens, num_experts, num_ranks, num_topk)
    high = threshold + 1e-6 + torch.rand(num_tokens, num_topk, dtype=torch.float32, device=device) * (1 - threshold - 1e-6)
    scores.scatter_(1, topk_idx, high)
    return scores


def get_scores_by_factor(num_tokens: int, num_experts: int, num_ranks: int, factor: float,
                         device=None) -> torch.Tensor:
    """Uniform scores, those of rank 0's experts scaled up to ``[0, factor)``."""
    scores = torch.rand(num_tokens, num_experts, dtype=torch.float32, device=device)
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
