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


# ---- DSA ---------------------------------------------------------------------------------------
def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Consecutive pairs as complex numbers, turned by pos * theta^(-2i/d)."""
    d = x.shape[-1]
    freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(len(pos), d // 2, dtype=torch.float64), pos.double().view(-1, 1) * freq)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    turn = turn.view(len(pos), *([1] * (x.dim() - 2)), d // 2)
    return torch.view_as_real(z * turn).flatten(-2).float()


# E4M3 keeps 3 mantissa bits: rounding moves a value by up to 2^-4 of itself, about 2^-4/sqrt(3) RMS.
E4M3_RELATIVE_RMS = 2 ** -4 / math.sqrt(3)


def indexer(cfg, w, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Lightning-indexer logits [L, L] of a sequence (-inf above the diagonal), FP32, and the RMS
    change E4M3 rounding of its queries and keys would cause in each logit (independent rounding
    errors: every product term q*k moves by ~sqrt(2) * E4M3_RELATIVE_RMS of itself)."""
    x = x.float()
    length, hi, di, rope_dim = x.shape[0], cfg.index_n_heads, cfg.index_head_dim, 64
    pos = torch.arange(length)
    cq = _rms_norm(x @ w.wq_a.float().T, w.q_norm, cfg.norm_eps)
    qi = (cq @ w.wq_index.float().T).view(length, hi, di)
    qi = torch.cat([_rope(qi[..., :rope_dim], pos, cfg.rope_theta), qi[..., rope_dim:]], dim=-1)
    ki = F.layer_norm(x @ w.wk_index.float().T, (di,), w.k_norm_weight, w.k_norm_bias, cfg.norm_eps)
    ki = torch.cat([_rope(ki[:, :rope_dim], pos, cfg.rope_theta), ki[:, rope_dim:]], dim=-1)
    head_w = (x @ w.weights_proj.float().T) * hi ** -0.5 * di ** -0.5
    scores = torch.einsum("ihd,jd->ijh", qi, ki)
    logits = torch.einsum("ih,ijh->ij", head_w, torch.relu(scores))
    squares = torch.einsum("ih,ihd,jd->ij", head_w.pow(2), qi.pow(2), ki.pow(2))
    noise = math.sqrt(2) * E4M3_RELATIVE_RMS * squares.sqrt()
    causal = pos.view(1, -1) > pos.view(-1, 1)
    return logits.masked_fill(causal, float("-inf")), noise


def dsa_sequence(cfg, w, x: torch.Tensor, select: list[torch.Tensor] | None = None, rows: list[int] | None = None):
    """DSA over one whole sequence ``x`` [L, dim] (positions 0..L-1), MLA in its plain (not absorbed)
    form, FP32, no quantisation. Query i attends to ``select[i]`` (positions) or, by default, to the
    top-``index_topk`` causal positions by the indexer's logits. Only query ``rows`` (default: all) are
    computed. Returns (out [len(rows), dim], the positions each row attended)."""
    x = x.float()
    length, h, nope, rope_dim = x.shape[0], cfg.n_heads, cfg.qk_nope_head_dim, 64
    pos = torch.arange(length)
    f = lambda t: t.float()  # noqa: E731
    cq = _rms_norm(x @ f(w.wq_a).T, w.q_norm, cfg.norm_eps)
    q = (cq @ f(w.wq_b).T).view(length, h, nope + rope_dim)
    q_nope, q_pe = q[..., :nope], _rope(q[..., nope:], pos, cfg.rope_theta)
    kv = x @ f(w.wkv_a).T
    c = _rms_norm(kv[:, :512], w.kv_norm, cfg.norm_eps)
    k_pe = _rope(kv[:, 512:], pos, cfg.rope_theta)
    kv_b = (c @ f(w.wkv_b).T).view(length, h, nope + cfg.v_head_dim)
    k_nope, v = kv_b[..., :nope], kv_b[..., nope:]

    if select is None:
        logits, _ = indexer(cfg, w, x)
        select = [logits[i, :i + 1].topk(min(cfg.index_topk, i + 1)).indices for i in range(length)]

    rows = list(range(length)) if rows is None else rows
    attended = torch.zeros(len(rows), length, dtype=torch.bool)  # each row's softmax runs over its set
    for n, i in enumerate(rows):
        attended[n, select[i]] = True
    r = torch.tensor(rows)
    score = torch.einsum("ihd,jhd->hij", q_nope[r], k_nope) + torch.einsum("ihd,jd->hij", q_pe[r], k_pe)
    score = (score / math.sqrt(nope + rope_dim)).masked_fill(~attended, float("-inf"))
    out = torch.einsum("hij,jhd->ihd", score.softmax(-1), v)
    return out.reshape(len(rows), -1) @ f(w.wo).T, select
