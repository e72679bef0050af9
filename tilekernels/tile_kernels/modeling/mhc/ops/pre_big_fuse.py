import torch

from .... import _checks as C
from ....reference.mhc import mhc_pre_split_mixes_ref, sinkhorn_normalize_ref
from .norm_fn import MHCPreNormFn
from .pre_apply_mix import apply_mix_fwd


def mhc_pre_big_fuse(residual: torch.Tensor, fn: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor,
                     rms_eps: float, mhc_pre_eps: float, mhc_sinkhorn_eps: float, mhc_post_mult_value: float,
                     sinkhorn_repeat: int, n_splits: int = 16):
    """Inference-only mhc_pre: norm_fn (no norm weight) -> split_mixes -> sinkhorn -> apply_mix.
    Returns ``(post (..., m, 1), comb (..., m, m), layer_input (..., H))``, bitwise equal to the
    composed ops."""
    C.tensor("residual", residual, dtypes=(torch.bfloat16,), ndim=range(3, 9), contiguous=True)
    m, h = residual.shape[-2:]
    m3 = m * (m + 2)
    C.tensor("fn", fn, dtypes=(torch.float32,), shape=(m3, m * h))
    C.tensor("mhc_scale", mhc_scale, dtypes=(torch.float32,), shape=(3,))
    C.tensor("mhc_base", mhc_base, dtypes=(torch.float32,), shape=(m3,))
    C.integer("sinkhorn_repeat", sinkhorn_repeat, 1)
    outer = residual.shape[:-2]
    with torch.no_grad():
        mixes = MHCPreNormFn.apply(residual, fn, rms_eps, False).reshape(1, -1, m3)
        pre, post, comb = mhc_pre_split_mixes_ref(mixes, mhc_scale, mhc_base, m, mhc_post_mult_value, mhc_pre_eps)
        comb = sinkhorn_normalize_ref(comb.reshape(-1, m, m), sinkhorn_repeat, mhc_sinkhorn_eps)
        layer_input = apply_mix_fwd(residual, pre.reshape(*outer, m, 1))
    return post.reshape(*outer, m, 1), comb.reshape(*outer, m, m), layer_input
