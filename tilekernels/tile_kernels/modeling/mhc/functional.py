"""High-level mHC entry points: expand the embedding, the per-sublayer pre step, the LM-head step."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .ops import (
    expand_to_mhc,
    mhc_head_compute_mix,
    mhc_pre_apply_mix,
    mhc_pre_big_fuse,
    mhc_pre_norm_fn,
    mhc_pre_split_mixes,
    sinkhorn_normalize,
)


def expand_from_embedding(x: torch.Tensor, mhc_mult: int = 4) -> torch.Tensor:
    """``(..., H)`` embedding -> ``(..., mhc_mult, H)`` residual stream."""
    return expand_to_mhc(x, mhc_mult)


def mhc_pre(residual: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, *,
            norm_weight: torch.Tensor | None = None, norm_eps: float = 1e-6, mhc_mult: int = 4,
            post_mult_value: float = 1.0, pre_eps: float = 1e-6, sinkhorn_eps: float = 1e-6, sinkhorn_repeat: int = 10,
            n_splits: int = 16) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Returns ``(layer_input, (post_mix, comb_mix))``; without grad it takes the fused path
    (which, like upstream, ignores ``norm_weight``)."""
    if not torch.is_grad_enabled():
        post_mix, comb_mix, layer_input = mhc_pre_big_fuse(residual, fn, scale, base, rms_eps=norm_eps,
                                                           mhc_pre_eps=pre_eps, mhc_sinkhorn_eps=sinkhorn_eps,
                                                           mhc_post_mult_value=post_mult_value,
                                                           sinkhorn_repeat=sinkhorn_repeat, n_splits=n_splits)
        return layer_input, (post_mix, comb_mix)
    mixes = mhc_pre_norm_fn(residual, fn, norm_weight, norm_eps, n_splits=n_splits)
    mixes = mixes.reshape(-1, *mixes.shape[-2:]) if mixes.dim() != 3 else mixes
    pre_mix, post_mix, comb_mix = mhc_pre_split_mixes(mixes, scale, base, mhc_mult, post_mult_value, pre_eps)
    comb_mix = sinkhorn_normalize(comb_mix, repeat=sinkhorn_repeat, eps=sinkhorn_eps)
    outer = residual.shape[:-2]
    layer_input = mhc_pre_apply_mix(residual, pre_mix.reshape(*outer, mhc_mult, 1))
    return layer_input, (post_mix.reshape(*outer, mhc_mult, 1), comb_mix.reshape(*outer, mhc_mult, mhc_mult))


def mhc_head(residual: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, *,
             norm_weight: torch.Tensor | None = None, norm_eps: float = 1e-6, mhc_mult: int = 4, pre_eps: float = 1e-6,
             n_splits: int = 16) -> torch.Tensor:
    """LM-head step: ``fn (m, m*H)`` zero-padded to m(m+2) rows, norm_fn, the first m mixes through
    head_compute_mix, then apply_mix."""
    m3 = mhc_mult * (mhc_mult + 2)
    if fn.shape[0] < m3:
        fn = F.pad(fn, (0, 0, 0, m3 - fn.shape[0]))
    mixes = mhc_pre_norm_fn(residual, fn, norm_weight, norm_eps, n_splits=n_splits)[..., :mhc_mult]
    if scale.numel() == 1:
        scale = scale.reshape(1)
    shaped = mixes.reshape(-1, *mixes.shape[-2:]) if mixes.dim() != 3 else mixes
    mix = mhc_head_compute_mix(shaped, scale, base, pre_eps).reshape(mixes.shape)
    return mhc_pre_apply_mix(residual, mix.unsqueeze(-1))
