"""Plain-PyTorch FP32 references of the two layers, written from the math (no library calls)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


# ---- MoE ---------------------------------------------------------------------------------------
def route(x: torch.Tensor, gate: torch.Tensor, bias: torch.Tensor, k: int, n_groups: int, n_limited: int,
          route_scale: float, score_func: str) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 gate: score, rank by score + bias inside the best groups, weights from the scores."""
    logits = x.float() @ gate.float().T
    if score_func == "softmax":
        scores = logits.softmax(-1)
    elif score_func == "sqrtsoftplus":
        scores = F.softplus(logits, threshold=20).sqrt()
    else:
        scores = torch.sigmoid(logits)
    ranking = (logits if score_func == "softmax" else scores) + bias  # softmax ranks by the raw logits
    if n_groups and n_groups != n_limited:
        grouped = ranking.view(x.shape[0], n_groups, -1)
        group_score = grouped.topk(2, dim=-1).values.sum(-1)
        keep = group_score.topk(n_limited, dim=-1).indices
        mask = torch.ones_like(group_score, dtype=torch.bool).scatter_(1, keep, False)
        ranking = grouped.masked_fill(mask.unsqueeze(-1), float("-inf")).view(x.shape[0], -1)
    idx = ranking.topk(k, dim=-1).indices
    w = scores.gather(1, idx)
    return idx, w / w.sum(-1, keepdim=True) * route_scale


def swiglu_ffn(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    h = x.float() @ w13.float().T
    gate, up = h.chunk(2, dim=-1)
    return (F.silu(gate) * up) @ w2.float().T


def moe(x: torch.Tensor, cfg, w) -> tuple[torch.Tensor, torch.Tensor]:
    """(output FP32 [T, hidden], topk_idx [T, k])."""
    idx, weights = route(x, w.gate, w.gate_bias, cfg.n_activated_experts, cfg.n_expert_groups, cfg.n_limited_groups,
                         cfg.route_scale, cfg.score_func)
    out = torch.zeros(x.shape[0], cfg.hidden)
    for e in range(cfg.n_routed_experts):
        tokens, slot = (idx == e).nonzero(as_tuple=True)
        if tokens.numel():
            out[tokens] += weights[tokens, slot, None] * swiglu_ffn(x[tokens], w.w13[e], w.w2[e])
    if cfg.n_shared_experts:
        out += swiglu_ffn(x, w.shared_w13, w.shared_w2)
    return out, idx
