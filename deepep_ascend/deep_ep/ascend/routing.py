"""The routing plan of a dispatch computed on the device, without reading it back: where each token
goes (``RoutePlan``), the count rows to exchange and the four error words of the ``topk_idx``
checks, which travel with the counts so that every rank raises the same error after that one
exchange (``ERR_RANGE`` / ``ERR_DUPLICATE``, then the token, the slot and the value as two int32 words,
low and high, so that an int64 expert id far out of range is reported as given)."""
from __future__ import annotations

import torch

from ..engine.checks import expert_id_error
from ..engine.plan import RoutePlan

ERR_RANGE, ERR_DUPLICATE = 1, 2
ERR_WORDS = 5


def plan(idx: torch.Tensor, hidden: int, num_experts: int, num_ranks: int) -> tuple[RoutePlan, torch.Tensor]:
    """``(plan with device tensors, error words [ERR_WORDS] int64 holding int32 values)``. Invalid ids are clamped so the plan
    stays well formed; the error words say what was wrong."""
    T, K = idx.shape
    R, dev = num_ranks, idx.device
    e_local = num_experts // R
    bad = (idx < -1) | (idx >= num_experts)
    same = (idx[:, :, None] == idx[:, None, :]) & (idx[:, :, None] >= 0)
    dup = (same & torch.ones(K, K, dtype=torch.bool, device=dev).tril(-1)).any(2)   # [T, K]: slot k repeats
    err = torch.stack([_first_error(bad, idx, ERR_RANGE), _first_error(dup, idx, ERR_DUPLICATE)])
    err = torch.where(err[0, 0] != 0, err[0], err[1])
    idx = torch.where(bad | dup, -1, idx)
    valid = idx >= 0
    owner = torch.where(valid, idx // e_local, R)
    in_rank = torch.zeros(T, R + 1, dtype=torch.bool, device=dev).scatter_(1, owner, True)[:, :R]
    dst_slot = torch.where(in_rank, torch.cumsum(in_rank.int(), 0) - 1, -1).int()
    # Token t's index among this rank's tokens for the same expert; (t, k)'s index among the
    # (token, slot) pairs bound for the same rank; both in (token, slot) order.
    expert_hot = torch.zeros(T, num_experts + 1, dtype=torch.int32, device=dev)
    expert_hot.scatter_(1, torch.where(valid, idx, num_experts), 1)
    within = torch.gather(torch.cumsum(expert_hot, 0) - 1, 1, torch.where(valid, idx, 0))
    within = torch.where(valid, within, -1).int()
    pair_hot = torch.zeros(T * K, R + 1, dtype=torch.int32, device=dev).scatter_(1, owner.reshape(-1, 1), 1)
    exp_pos = torch.gather(torch.cumsum(pair_hot, 0) - 1, 1, owner.reshape(-1, 1)).view(T, K)
    exp_pos = torch.where(valid, exp_pos, -1).int()
    per_expert = expert_hot[:, :num_experts].sum(0).view(R, e_local)
    counts = torch.cat([in_rank.sum(0).int()[:, None], per_expert.int()], 1)
    return RoutePlan(hidden, R, e_local, dst_slot, within, exp_pos, counts), err


def _first_error(mask: torch.Tensor, idx: torch.Tensor, code: int) -> torch.Tensor:
    """``[code, t, k, idx[t, k]]`` of the first set (t, k) in row-major order, or zeros."""
    T, K = mask.shape
    if T * K == 0:
        return torch.zeros(ERR_WORDS, dtype=torch.int64, device=idx.device)
    flat = torch.where(mask.reshape(-1), torch.arange(T * K, device=idx.device), T * K).min()
    hit = flat < T * K
    at = flat.clamp(max=T * K - 1)
    value = idx.reshape(-1)[at].long()
    low = (value + 2 ** 31) % 2 ** 32 - 2 ** 31       # signed low half: both halves fit the int32 exchange
    words = torch.stack([torch.full_like(at, code), at // K, at % K, low, (value - low) // 2 ** 32])
    return torch.where(hit, words, 0)


def error_message(words: list[int], num_experts: int) -> str | None:
    code, t, k, low, high = words
    value = high * 2 ** 32 + low
    if code in (ERR_RANGE, ERR_DUPLICATE):
        return expert_id_error(code, t, k, value, num_experts)
    return None
