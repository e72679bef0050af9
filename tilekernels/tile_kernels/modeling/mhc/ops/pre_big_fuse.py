import torch

from deepjit import validation as C

from ._forward import pre_big_fuse


def mhc_pre_big_fuse(residual: torch.Tensor, fn: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor,
                     rms_eps: float, mhc_pre_eps: float, mhc_sinkhorn_eps: float, mhc_post_mult_value: float,
                     sinkhorn_repeat: int, n_splits: int = 16):
    """Inference-only mhc_pre: norm_fn (no norm weight) -> split_mixes -> sinkhorn -> apply_mix.
    Returns ``(post (..., m, 1), comb (..., m, m), layer_input (..., H))``, bitwise equal to the
    composed ops (one host kernel after the projection GEMM on CPU)."""
    C.tensor("residual", residual, dtypes=(torch.bfloat16,), ndim=range(3, 9), contiguous=True)
    m, h = residual.shape[-2:]
    m3 = m * (m + 2)
    C.tensor("fn", fn, dtypes=(torch.float32,), shape=(m3, m * h))
    C.tensor("mhc_scale", mhc_scale, dtypes=(torch.float32,), shape=(3,))
    C.tensor("mhc_base", mhc_base, dtypes=(torch.float32,), shape=(m3,))
    C.integer("sinkhorn_repeat", sinkhorn_repeat, 1)
    outer = residual.shape[:-2]
    with torch.no_grad():
        post, comb, layer_input = pre_big_fuse(residual, fn, mhc_scale, mhc_base, rms_eps, mhc_pre_eps,
                                               mhc_sinkhorn_eps, mhc_post_mult_value, sinkhorn_repeat)
    return post.reshape(*outer, m, 1), comb.reshape(*outer, m, m), layer_input.reshape(*outer, h)
