"""MoE bookkeeping: counting, normalisation, TP masking, de-duplication, the expert-major
("fused") layout and the expand / reduce between token-major and expert-major rows."""
from __future__ import annotations

from typing import Union

import torch

from ..utils import align
from .numerics import fma
from .topk import mask_by_ep_tp


def aux_fi(topk_idx: torch.Tensor, num_experts: int, num_aux_topk: int) -> torch.Tensor:
    """``f_i[e] = count[e] * num_experts / (num_tokens * num_aux_topk)``, -1 entries ignored."""
    num_tokens = topk_idx.shape[0]
    if num_tokens == 0:
        return torch.zeros(num_experts, dtype=torch.float32, device=topk_idx.device)
    counts = torch.bincount(topk_idx[topk_idx >= 0], minlength=num_experts)
    return counts.float() * num_experts / (num_tokens * num_aux_topk)


def group_count(group_idx: torch.Tensor, num_groups: int) -> torch.Tensor:
    return torch.bincount(group_idx[group_idx >= 0], minlength=num_groups).to(torch.int32)


def mask_indices_by_tp(indices: torch.Tensor, n: int, num_ep_ranks: int, tp_rank: int, num_tp_ranks: int) -> torch.Tensor:
    return mask_by_ep_tp(indices, n // num_ep_ranks, tp_rank, num_tp_ranks).to(indices.dtype)


def normalize_weight(topk_weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequential FP32 sum starting at 1e-20, then divide."""
    den = torch.full((topk_weights.shape[0],), 1e-20, dtype=torch.float32, device=topk_weights.device)
    for k in range(topk_weights.shape[1]):
        den = den + topk_weights[:, k]
    return den, topk_weights / den.unsqueeze(1)


def inplace_unique_group_indices(group_indices: torch.Tensor, num_groups: int) -> None:
    """Every repeat of a value after its leftmost occurrence in a row becomes -1 (in place)."""
    k = group_indices.shape[1]
    same = group_indices.unsqueeze(2) == group_indices.unsqueeze(1)  # [t, i, j]: g[i] == g[j]
    earlier = torch.ones(k, k, dtype=torch.bool, device=group_indices.device).tril(-1)  # j < i
    repeat = (same & earlier).any(2) & (group_indices >= 0)
    group_indices[repeat] = -1


def get_fused_mapping(topk_idx: torch.Tensor, num_experts: int, num_expanded_tokens: int, alignment: int,
                      force_no_sync: bool = False):
    """Expert-major layout; inside an expert, (token, k) pairs are in ascending order."""
    num_tokens, num_topk = topk_idx.shape
    device = topk_idx.device
    flat = topk_idx.reshape(-1)
    counts = torch.bincount(flat[flat >= 0], minlength=num_experts)[:num_experts]
    padded = (counts + alignment - 1) // alignment * alignment
    end = torch.cumsum(padded, 0)
    start = end - padded
    sync = num_expanded_tokens == 0 and not force_no_sync
    if num_expanded_tokens == 0:
        num_expanded_tokens = (num_tokens * num_topk + (alignment - 1) * num_experts) // alignment * alignment
    pos_to_expert = torch.full((num_expanded_tokens,), -1, dtype=torch.int32, device=device)
    pos_to_token = torch.full_like(pos_to_expert, -1)
    pos_to_token_topk = torch.full_like(pos_to_expert, -1)
    token_topk_to_pos = torch.full((num_tokens, num_topk), -1, dtype=torch.int32, device=device)
    valid = (flat >= 0).nonzero().squeeze(1)
    if valid.numel() > 0:
        experts = flat[valid]
        order = torch.sort(experts, stable=True).indices
        slots, experts = valid[order], experts[order]
        first = torch.cumsum(counts, 0) - counts
        rank = torch.arange(slots.numel(), device=device) - first[experts]
        pos = start[experts] + rank
        pos_to_expert[pos] = experts.to(torch.int32)
        pos_to_token[pos] = (slots // num_topk).to(torch.int32)
        pos_to_token_topk[pos] = slots.to(torch.int32)
        token_topk_to_pos.view(-1)[slots] = pos.to(torch.int32)
    per_expert = padded.to(torch.int32)
    counts_list = []
    if sync:
        counts_list = per_expert.tolist()
        total = sum(counts_list)
        pos_to_expert, pos_to_token, pos_to_token_topk = (t[:total] for t in (pos_to_expert, pos_to_token, pos_to_token_topk))
    return (pos_to_expert, pos_to_token, pos_to_token_topk, token_topk_to_pos, start.to(torch.int32),
            end.to(torch.int32), per_expert, counts_list)


def expand_to_fused(x: torch.Tensor, token_topk_to_pos: torch.Tensor, pos_to_expert: torch.Tensor) -> torch.Tensor:
    out = torch.zeros((pos_to_expert.shape[0], x.shape[1]), dtype=x.dtype, device=x.device)
    pos = token_topk_to_pos.reshape(-1).long()
    src = torch.arange(x.shape[0], device=x.device).repeat_interleave(token_topk_to_pos.shape[1])
    keep = pos >= 0
    out[pos[keep]] = x[src[keep]]
    return out


def expand_to_fused_with_sf(x: tuple[torch.Tensor, torch.Tensor], num_per_channels: int, token_topk_to_pos: torch.Tensor,
                            pos_to_expert: torch.Tensor, use_tma_aligned_col_major_sf: bool = False):
    data, sf = x
    num_rows = pos_to_expert.shape[0]
    out = expand_to_fused(data, token_topk_to_pos, pos_to_expert)
    if use_tma_aligned_col_major_sf:
        out_sf = torch.zeros((sf.shape[1], align(num_rows, 4)), dtype=sf.dtype, device=sf.device)[:, :num_rows].T
    else:
        out_sf = torch.zeros((num_rows, sf.shape[1]), dtype=sf.dtype, device=sf.device)
    pos = token_topk_to_pos.reshape(-1).long()
    src = torch.arange(sf.shape[0], device=sf.device).repeat_interleave(token_topk_to_pos.shape[1])
    keep = pos >= 0
    out_sf[pos[keep]] = sf[src[keep]]
    return out, out_sf


def reduce_fused(x: Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]], topk_weights: torch.Tensor | None,
                 token_topk_to_pos: torch.Tensor, fp8_format: str = "", sf: torch.Tensor | None = None) -> torch.Tensor:
    """Per token, in k order: ``acc = fma(x[pos], w * x_sf[pos], acc)`` in FP32, then ``* sf[0]``."""
    x, x_sf = x if isinstance(x, tuple) else (x, None)
    num_tokens, num_topk = token_topk_to_pos.shape
    out_dtype = torch.float8_e4m3fn if fp8_format == "e4m3" else x.dtype
    acc = torch.zeros((num_tokens, x.shape[1]), dtype=torch.float32, device=x.device)
    for k in range(num_topk):
        pos = token_topk_to_pos[:, k].long()
        valid = pos >= 0
        safe = pos.clamp(min=0)
        s = topk_weights[:, k].float() if topk_weights is not None else torch.ones(num_tokens, device=x.device)
        if x_sf is not None:
            s = s * x_sf[safe]
        acc = torch.where(valid.unsqueeze(1), fma(x[safe].float(), s.unsqueeze(1), acc), acc)
    if sf is not None:
        acc = acc * sf[0]
    return acc.to(out_dtype)
