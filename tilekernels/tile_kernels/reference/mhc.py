"""Manifold hyper-connections: references for the forward math of every mHC op."""
from __future__ import annotations

import torch


def expand_to_mhc_ref(hidden: torch.Tensor, mhc_mult: int) -> torch.Tensor:
    return hidden.unsqueeze(-2).expand(*hidden.shape[:-1], mhc_mult, hidden.shape[-1]).contiguous()


def sinkhorn_normalize_ref(x: torch.Tensor, repeat: int = 10, eps: float = 1e-6) -> torch.Tensor:
    """Softmax over rows, then alternate column and row normalisation (columns first and last)."""
    x = x.softmax(-1) + eps
    x = x / (x.sum(-2, keepdim=True) + eps)
    for _ in range(repeat - 1):
        x = x / (x.sum(-1, keepdim=True) + eps)
        x = x / (x.sum(-2, keepdim=True) + eps)
    return x


def mhc_head_compute_mix_ref(input_mix, mhc_scale, mhc_base, mhc_pre_eps):
    return torch.sigmoid(input_mix * mhc_scale + mhc_base) + mhc_pre_eps


def mhc_pre_split_mixes_ref(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps):
    """``(n0, n1, m(m+2))`` mixes -> pre ``(.., m, 1)``, post ``(.., m, 1)``, comb ``(.., m, m)``."""
    m = mhc_mult
    n0, n1 = input_mixes.shape[:2]
    scale = torch.cat([mhc_scale[0].expand(m), mhc_scale[1].expand(m), mhc_scale[2].expand(m * m)])
    z = input_mixes * scale + mhc_base
    pre = torch.sigmoid(z[..., :m]).unsqueeze(-1) + mhc_pre_eps
    post = (torch.sigmoid(z[..., m:2 * m]) * mhc_post_mult_value).unsqueeze(-1)
    comb = z[..., 2 * m:].reshape(n0, n1, m, m)
    return pre, post, comb


def mhc_pre_apply_mix_ref(x: torch.Tensor, mix: torch.Tensor) -> torch.Tensor:
    return (x * mix).sum(-2).bfloat16()


def mhc_post_ref(x, residual, post_layer_mix, comb_res_mix):
    """``out[n] = post[n] x + sum_i comb[i, n] residual[i]``, FP32 then BF16."""
    mixed = torch.einsum("abmn,abmc->abnc", comb_res_mix, residual.float())
    return (x.float().unsqueeze(-2) * post_layer_mix + mixed).bfloat16()


def mhc_pre_norm_fn_ref(residual, mhc_fn, mhc_norm_weight, mhc_norm_eps):
    """``out_j = <r, fn_j> * rsqrt(mean(r^2) + eps)`` with r the flattened FP32 residual."""
    if mhc_norm_weight is not None:
        mhc_fn = mhc_fn * mhc_norm_weight
    r = residual.flatten(-2).float()
    return (r @ mhc_fn.T) * torch.rsqrt(r.square().mean(-1, keepdim=True) + mhc_norm_eps)
