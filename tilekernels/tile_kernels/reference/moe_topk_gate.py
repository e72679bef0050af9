"""The DeepSeek-V4.1 router (TileKernels 2.x ``moe_topk_gate_forward``), written with torch ops.

Per token (one row of ``logits``), in the order the upstream kernel decides:
1. ``mask[t]`` False: not routed (ids -1, weights 0, ``unmapped_topk_idx`` -1, ``scores`` row 0);
2. ``force_random[t]``: distinct random physical experts with random weights in (0, 1], ``unmapped_topk_idx``
   -1, ``scores`` row 0 (the stream is ``random_words``: a counter hash of ``ep_rank``, the token and the
   slot, not curand's Philox; upstream's test checks range, distinctness and uniformity, not values);
3. otherwise scores ``sqrt(softplus(logits))`` (``sqrt_softplus``), ranked with ``bias`` (or ``image_bias``
   for image tokens) added, lowest expert first on ties, NaN above every number (torch's stable sort) --
   or, with ``fix_routing_mask[t]``, the experts already in ``unmapped_topk_idx``; weights are the unbiased
   scores over their sum (summed slot by slot) plus 1e-20, times ``routed_scaling_factor``; shared experts
   follow as slots of weight 1; every slot then maps to a physical replica
   ``to_physical_map[e, (ep_rank + t * 23333) % logical_count[e]]``.
"""
from __future__ import annotations

import torch

from .topk import DUPLICATE_HASH

_U32 = 0xFFFFFFFF


def sqrt_softplus(logits: torch.Tensor) -> torch.Tensor:
    """FP32 ``sqrt(softplus(x))`` (softplus the identity above 20, as torch's), computed in FP64 and rounded
    once: the form upstream's oracle takes on Ascend. It is independent of where an element sits (torch's
    FP32 CPU softplus mixes vector and scalar exp/log1p by position) and within an ulp of torch's FP32."""
    x = logits.double()
    return torch.where(x > 20.0, x, torch.log1p(torch.exp(x))).sqrt().float()


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``x * c mod 2**32`` for x in [0, 2**32) without int64 overflow (the constant split in 16-bit halves)."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _U32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xor-shift-multiply finaliser) of values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def random_words(ep_rank: int, tokens: torch.Tensor, slot: int, stream: int) -> torch.Tensor:
    """32-bit random words (int64) of ``tokens`` for one output slot; stream 0 draws ids, stream 1 weights."""
    key = _mix32(torch.tensor(slot * 2 + stream, dtype=torch.int64)) ^ (ep_rank & _U32)
    return _mix32(_mix32(key) ^ (tokens & _U32))


def random_rows(tokens: torch.Tensor, width: int, num_physical: int, ep_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token, ``width`` distinct ids in [0, num_physical) and weights in (0, 1]: slot j takes the
    ``(word % (num_physical - j))``-th id (ascending) of those slots 0..j-1 left free."""
    n = tokens.numel()
    ids = torch.empty((n, width), dtype=torch.int64)
    weights = torch.empty((n, width), dtype=torch.float32)
    taken = torch.empty((n, 0), dtype=torch.int64)   # ascending per row
    for j in range(width):
        pick = random_words(ep_rank, tokens, j, 0) % (num_physical - j)
        for i in range(j):                              # step over the ids already taken, smallest first
            pick = pick + (taken[:, i] <= pick).to(torch.int64)
        ids[:, j] = pick
        taken = torch.cat([taken, pick[:, None]], 1).sort(1).values
        weights[:, j] = ((random_words(ep_rank, tokens, j, 1) >> 8) + 1).float() * 2.0 ** -24
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

    unbiased = sqrt_softplus(logits)
    ranking_bias = torch.zeros(num_experts, device=device) if bias is None else bias
    if image_token_mask is not None:
        ranking = unbiased + torch.where(image_token_mask[:, None], image_bias[None, :], ranking_bias[None, :])
    else:
        ranking = unbiased + ranking_bias
    chosen = torch.sort(ranking, dim=1, descending=True, stable=True).indices[:, :num_topk]
    if fix_routing_mask is not None:
        chosen = torch.where(fix_routing_mask[:, None], unmapped_topk_idx.to(torch.int64), chosen)
    chosen = torch.where(routed[:, None], chosen, 0)    # unrouted rows may hold any fixed ids: never index with them
    chosen_scores = unbiased.gather(1, chosen)
    total = chosen_scores[:, 0]
    for k in range(1, num_topk):                        # slot by slot, as the kernel sums
        total = total + chosen_scores[:, k]
    weights = chosen_scores / (total[:, None] + 1e-20) * routed_scaling_factor
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
        rand_ids, rand_weights = random_rows(rows.cpu(), topk_idx.shape[1], num_physical, ep_rank)
        topk_idx[rows] = rand_ids.to(device)
        topk_weights[rows] = rand_weights.to(device)
