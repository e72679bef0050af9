"""The test oracle, written from the spec's description of DeepEP's semantics and independent of
the code under test: dispatch is a plain ``torch.distributed.all_to_all_single`` exchange; combine
is emulated on the source rank from synthetic expert outputs that depend only on
(src_token_global_idx, top-k slot), in upstream's order (``deep_ep/utils/refs.py::combine``: start
from the biases in FP32, add each receiving rank's partial at its last top-k slot, partials rounded
to BF16 once, one final BF16 rounding)."""
from __future__ import annotations

import math

import torch
import torch.distributed as dist


def make_routing(num_tokens: int, num_topk: int, num_experts: int, seed: int, masked_ratio: float = 0.1):
    """Distinct experts per token from random scores, some slots masked with -1."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(num_tokens, num_experts, generator=g, dtype=torch.float32)
    topk_weights, topk_idx = torch.topk(scores, num_topk, dim=1)
    masked = torch.rand(num_tokens, num_topk, generator=g, dtype=torch.float32) < masked_ratio
    topk_idx = topk_idx.masked_fill(masked, -1).to(torch.int64)
    topk_weights = topk_weights.masked_fill(masked, 0.0).float()
    return topk_idx, topk_weights


def make_x(num_tokens: int, hidden: int, seed: int, fp8: str | None = None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_tokens, hidden, generator=g, dtype=torch.float32).bfloat16()
    if fp8 is None:
        return x
    x_fp8 = (torch.randn(num_tokens, hidden, generator=g, dtype=torch.float32) * 100).to(torch.float8_e4m3fn)
    packs = hidden // 128
    if fp8 == "float":
        sf = torch.rand(num_tokens, packs, generator=g, dtype=torch.float32) + 0.5
        return x_fp8, sf.T.contiguous().T  # column-major scales, as upstream tests pass them
    sf = torch.randint(0, 1 << 30, (num_tokens, (packs + 3) // 4), generator=g, dtype=torch.int32)
    return x_fp8, sf


def _a2a(tensor: torch.Tensor, send_counts: list[int], recv_counts: list[int], group) -> torch.Tensor:
    rows = tensor.reshape(tensor.shape[0], math.prod(tensor.shape[1:]))  # not -1: a rank may send no row
    raw = rows.view(torch.uint8) if rows.dtype.itemsize == 1 else rows
    if raw.dtype in (torch.float8_e4m3fn,):
        raw = raw.view(torch.uint8)
    out = torch.empty(sum(recv_counts), raw.shape[1], dtype=raw.dtype)
    dist.all_to_all_single(out, raw.contiguous(), recv_counts, send_counts, group=group)
    out = out.view(tensor.dtype) if tensor.dtype == torch.float8_e4m3fn else out
    return out.view(sum(recv_counts), *tensor.shape[1:])


def dispatch(x, sf, topk_idx, topk_weights, num_experts: int, num_max_tokens_per_rank: int, group=None):
    """Every token goes once to every rank holding one of its experts; rows arrive sorted by
    source rank, then source token. Returns a dict of received tensors."""
    R, rank = dist.get_world_size(group), dist.get_rank(group)
    e_local = num_experts // R
    owner = torch.where(topk_idx >= 0, topk_idx // e_local, -1)
    sends = [(owner == d).any(1).nonzero().squeeze(1) for d in range(R)]
    send_counts = torch.tensor([len(s) for s in sends])
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    send_counts, recv_counts = send_counts.tolist(), recv_counts.tolist()
    order = torch.cat(sends)
    dst = torch.cat([torch.full((len(s),), d) for d, s in enumerate(sends)])
    local_idx = torch.where(owner[order] == dst[:, None], topk_idx[order] % e_local, -1)
    out = {"x": _a2a(x[order], send_counts, recv_counts, group),
           "topk_idx": _a2a(local_idx, send_counts, recv_counts, group),
           "src": _a2a((rank * num_max_tokens_per_rank + order).to(torch.int64), send_counts, recv_counts, group),
           "counts": recv_counts}
    if sf is not None:
        out["sf"] = _a2a(sf[order].contiguous(), send_counts, recv_counts, group)
    if topk_weights is not None:
        w = torch.where(local_idx >= 0, topk_weights[order], 0.0)
        out["weights"] = _a2a(w, send_counts, recv_counts, group)
    return out


def expert_output(src_global: torch.Tensor, slot: torch.Tensor, hidden: int) -> torch.Tensor:
    """Synthetic BF16 expert output for (src_token_global_idx, top-k slot) pairs."""
    cols = torch.arange(hidden, dtype=torch.float64)
    phase = src_global.double()[:, None] * 0.731 + slot.double()[:, None] * 1.913
    return (torch.sin(phase + cols[None, :] * 0.0137) * 3).bfloat16()


def combine(topk_idx, num_experts: int, num_ranks: int, rank: int, num_max_tokens_per_rank: int, hidden: int,
            bias=(), multiple_reduction: bool = True) -> torch.Tensor:
    """What every rank's combine must return for its own tokens, when each expert produced
    ``expert_output`` for its (token, slot) pairs."""
    T, K = topk_idx.shape
    e_local = num_experts // num_ranks
    g = rank * num_max_tokens_per_rank + torch.arange(T)
    acc = torch.zeros(T, hidden, dtype=torch.float32)
    if len(bias) == 1:
        acc = bias[0].float()
    elif len(bias) == 2:
        acc = bias[0].float() + bias[1].float()
    owner = torch.where(topk_idx >= 0, topk_idx // e_local, -1)
    y = [expert_output(g, torch.full((T,), k), hidden).float() for k in range(K)]
    for k in range(K):
        valid = owner[:, k] >= 0
        if not multiple_reduction:
            acc = torch.where(valid[:, None], acc + y[k], acc)
            continue
        last = valid.clone()
        for q in range(k + 1, K):
            last &= owner[:, q] != owner[:, k]
        # The partial of the rank owning slot k: its local slots summed in slot order, rounded once.
        partial = torch.zeros(T, hidden, dtype=torch.float32)
        started = torch.zeros(T, dtype=torch.bool)
        for q in range(K):
            mine = (owner[:, q] == owner[:, k]) & valid
            partial = torch.where((mine & started)[:, None], partial + y[q], torch.where(mine[:, None], y[q], partial))
            started |= mine
        acc = torch.where(last[:, None], acc + partial.bfloat16().float(), acc)
    return acc.bfloat16()


def ordered_sum(rows: list[torch.Tensor]) -> torch.Tensor:
    """FP32 sum in list order (first term taken as is), rounded to BF16 once."""
    acc = rows[0].float()
    for r in rows[1:]:
        acc = acc + r.float()
    return acc.bfloat16()
