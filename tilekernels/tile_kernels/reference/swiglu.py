"""SwiGLU forward/backward on the expert-major ("fused") layout, with optional routing weights and
clamping; FP32 math with the library exponential (numerics.exp_f32) so the fused kernels match
bit for bit."""
from __future__ import annotations

import torch

from .cast import dequantize
from .numerics import exp_f32, fma


def row_weights(pos_to_token_topk: torch.Tensor, topk_weights: torch.Tensor, num_rows: int) -> torch.Tensor:
    """Routing weight of every expanded row (0 where the row maps to no (token, topk) slot)."""
    flat = topk_weights.reshape(-1).to(torch.float32)
    valid = pos_to_token_topk >= 0
    w = torch.zeros(num_rows, dtype=torch.float32, device=topk_weights.device)
    w[valid] = flat[pos_to_token_topk[valid].long()]
    return w


def swiglu_forward(x: torch.Tensor, pos_to_token_topk: torch.Tensor | None = None,
                   topk_weights: torch.Tensor | None = None, swiglu_clamp_value: float | None = None,
                   clamped_count: torch.Tensor | None = None) -> torch.Tensor:
    """``silu(a) * b`` (times the row's routing weight) for ``x = [a, b]``; FP32 ``(P, H)``."""
    xf = x.to(torch.float32)
    h = xf.shape[1] // 2
    a, b = xf[:, :h], xf[:, h:]
    if swiglu_clamp_value is not None:
        c = swiglu_clamp_value
        if clamped_count is not None:
            clamped_count[0] += (a > c).sum()
            clamped_count[1] += (b > c).sum()
            clamped_count[2] += (b < -c).sum()
        a = torch.clamp(a, max=c)
        b = torch.clamp(b, min=-c, max=c)
    y = a / (1.0 + exp_f32(-a)) * b
    if pos_to_token_topk is not None:
        y = y * row_weights(pos_to_token_topk, topk_weights, xf.shape[0]).unsqueeze(1)
    return y


def swiglu_backward(x: tuple[torch.Tensor, torch.Tensor], grad_out: torch.Tensor, weight: torch.Tensor,
                    pos_to_token_topk: torch.Tensor, token_topk_to_pos: torch.Tensor, num_per_channels: int,
                    swiglu_clamp_value: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Returns FP32 ``(out, x_grad, weight_grad)`` for the E4M3-quantised input ``x = (q, sf)``."""
    q, sf = x
    h = q.shape[-1] // 2
    q = q.reshape(-1, 2 * h)
    xf = dequantize(q, sf, (1, num_per_channels))
    a, b = xf[:, :h], xf[:, h:]
    g = grad_out.reshape(-1, h).to(torch.float32)
    if swiglu_clamp_value is not None:
        c = swiglu_clamp_value
        a_clamped = a > c
        b_clamped = (b > c) | (b < -c)
        a = torch.clamp(a, max=c)
        b = torch.clamp(b, min=-c, max=c)
    denom = 1.0 + exp_f32(-a)
    sig = 1.0 / denom
    w = row_weights(pos_to_token_topk, weight, q.shape[0]).unsqueeze(1)
    gws = g * w * sig
    da = gws * b * fma(a, 1.0 - sig, torch.ones_like(a))
    db = gws * a
    if swiglu_clamp_value is not None:
        da = torch.where(a_clamped, torch.zeros_like(da), da)
        db = torch.where(b_clamped, torch.zeros_like(db), db)
    act = a / denom * b
    out = act * w
    weight_grad = torch.zeros_like(weight, dtype=torch.float32)
    valid = pos_to_token_topk >= 0
    weight_grad.view(-1)[pos_to_token_topk[valid].long()] = (g * act).sum(1)[valid]
    return out, torch.cat([da, db], 1), weight_grad
