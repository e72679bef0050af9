"""Engram: n-gram hashing into embedding-table rows and the RMS-normalised dot-product gate."""
from __future__ import annotations

import torch


def make_offsets(vocab_sizes: torch.Tensor) -> torch.Tensor:
    """Exclusive prefix sums of each layer's flattened table sizes: (L, (N-1)*M) int32."""
    flat = vocab_sizes.reshape(vocab_sizes.shape[0], -1).to(torch.int64)
    return (torch.cumsum(flat, 1) - flat).to(torch.int32)


def engram_hash_ref(ngram_token_ids: torch.Tensor, multipliers: torch.Tensor, vocab_sizes: torch.Tensor,
                    offsets: torch.Tensor) -> torch.Tensor:
    """``h_0 = id_0 m_0``, ``h_i = h_{i-1} xor id_i m_i`` (wrapping int64); table j of n-gram i
    gets row ``h_i mod vocab[l, i-1, j] + offsets[l, (i-1) M + j]``. Returns (L, T, (N-1) M) int32."""
    num_layers, n = multipliers.shape
    prod = ngram_token_ids.to(torch.int64).unsqueeze(0) * multipliers.unsqueeze(1)  # (L, T, N)
    h = prod[:, :, 0]
    parts = []
    for i in range(1, n):
        h = h ^ prod[:, :, i]
        vocab = vocab_sizes[:, i - 1].to(torch.int64).unsqueeze(1)  # (L, 1, M)
        parts.append(torch.remainder(h.unsqueeze(-1), vocab))
    return (torch.cat(parts, -1) + offsets.unsqueeze(1).to(torch.int64)).to(torch.int32)


def engram_gate_ref(hidden_states: torch.Tensor, k: torch.Tensor, v: torch.Tensor, weight_hidden: torch.Tensor,
                    weight_embed: torch.Tensor, clamp_value: float, eps: float, save_for_backward: bool = False):
    """``out = x + sigmoid(signed_sqrt(<x wh, k we> rstd_x rstd_k / sqrt(H))) v`` (autograd-able).

    With ``save_for_backward`` also returns the raw dot, the gate and both rstds, all (T, hc) FP32."""
    hidden = hidden_states.shape[-1]
    x = hidden_states.float()
    kf = k.float()
    rstd_x = torch.rsqrt(x.square().mean(-1) + eps)
    rstd_k = torch.rsqrt(kf.square().mean(-1) + eps)
    dot = ((x * weight_hidden.float()) * (kf * weight_embed.float())).sum(-1)
    s = dot * rstd_x * rstd_k * hidden ** -0.5
    gate = torch.sigmoid(s.abs().clamp_min(clamp_value).sqrt() * s.sign())
    out = (x + gate.unsqueeze(-1) * v.float().unsqueeze(-2)).bfloat16()
    if save_for_backward:
        return out, dot, gate, rstd_x, rstd_k
    return out


def fused_weight(weight_hidden: torch.Tensor, weight_embed: torch.Tensor) -> torch.Tensor:
    """The two norm weights multiplied in FP32: the ``weight_fused`` (hc, H) the gate kernels take."""
    return weight_hidden.float() * weight_embed.float()


def engram_gate_fwd(hidden_states, k, v, weight_fused, eps, clamp_value, save_for_backward=True):
    """The kernel form: the two norm weights already multiplied into ``weight_fused`` (hc, H)."""
    hidden = hidden_states.shape[-1]
    x = hidden_states.float()
    kf = k.float()
    rstd_x = torch.rsqrt(x.square().mean(-1) + eps)
    rstd_k = torch.rsqrt(kf.square().mean(-1) + eps)
    dot = (x * kf * weight_fused.unsqueeze(0)).sum(-1)
    s = dot * rstd_x * rstd_k * hidden ** -0.5
    gate = torch.sigmoid(s.abs().clamp_min(clamp_value).sqrt() * s.sign())
    out = (x + gate.unsqueeze(-1) * v.float().unsqueeze(-2)).bfloat16()
    if save_for_backward:
        return out, dot, gate, rstd_x, rstd_k
    return out, None, None, None, None


def engram_gate_bwd(grad_out, hidden_states, k, v, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
                    num_blocks: int):
    """Hand-derived gradient of engram_gate_fwd; ``grad_w_partial`` holds the weight gradient
    summed over ``num_blocks`` contiguous token ranges (num_blocks, hc, H)."""
    hidden = hidden_states.shape[-1]
    scale = hidden ** -0.5
    g = grad_out.float()
    x = hidden_states.float()
    kf = k.float()
    vf = v.float()
    s = dot * rstd_x * rstd_k * scale
    d_gate = (g * vf.unsqueeze(1)).sum(-1)
    d_q = d_gate * gate_score * (1 - gate_score)
    mag = s.abs()
    d_s = torch.where(mag >= clamp_value, d_q / (2 * mag.clamp_min(clamp_value).sqrt()), torch.zeros_like(d_q))
    d_dot = d_s * rstd_x * rstd_k * scale
    d_rx = d_s * dot * rstd_k * scale
    d_rk = d_s * dot * rstd_x * scale
    w = weight_fused.unsqueeze(0)
    grad_x = g + d_dot.unsqueeze(-1) * kf * w - (d_rx * rstd_x ** 3 / hidden).unsqueeze(-1) * x
    grad_k = d_dot.unsqueeze(-1) * x * w - (d_rk * rstd_k ** 3 / hidden).unsqueeze(-1) * kf
    grad_v = (g * gate_score.unsqueeze(-1)).sum(1)
    per_token = d_dot.unsqueeze(-1) * x * kf
    num_tokens = x.shape[0]
    partial = torch.zeros((num_blocks, *weight_fused.shape), dtype=torch.float32, device=x.device)
    bounds = [num_tokens * i // num_blocks for i in range(num_blocks + 1)]
    for i in range(num_blocks):
        partial[i] = per_token[bounds[i]:bounds[i + 1]].sum(0)
    return grad_x.to(hidden_states.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype), partial


def grad_w_reduce(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed) -> None:
    """In place: ``s = grad_w_partial.sum(0)``; ``grad_wh += s * we``; ``grad_we += s * wh`` (FP32)."""
    s = grad_w_partial.sum(0)
    grad_weight_hidden.add_(s * weight_embed.float())
    grad_weight_embed.add_(s * weight_hidden.float())
