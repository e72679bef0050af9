import torch

from deepjit import validation as C

from ....reference.mhc import mhc_pre_split_mixes_ref
from ._forward import split_mixes
from ._grad import recompute_grads


class MHCPreSplitMixes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_mixes, mhc_scale, mhc_base, mhc_mult, post_mult, pre_eps):
        ctx.save_for_backward(input_mixes, mhc_scale, mhc_base)
        ctx.args = (mhc_mult, post_mult, pre_eps)
        return split_mixes(input_mixes, mhc_scale, mhc_base, *ctx.args)

    @staticmethod
    def backward(ctx, d_pre, d_post, d_comb):
        saved = ctx.saved_tensors
        g = recompute_grads(mhc_pre_split_mixes_ref, (*saved, *ctx.args), (d_pre, d_post, d_comb))
        return g[0], g[1], g[2], None, None, None


def mhc_pre_split_mixes(input_mixes: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor, mhc_mult: int,
                        mhc_post_mult_value: float, mhc_pre_eps: float):
    """``(n0, n1, m(m+2))`` mixes -> pre ``(.., m, 1)``, post ``(.., m, 1)``, comb ``(.., m, m)``."""
    C.integer("mhc_mult", mhc_mult, 1)
    m3 = mhc_mult * (mhc_mult + 2)
    C.tensor("input_mixes", input_mixes, dtypes=(torch.float32,), ndim=3)
    if input_mixes.shape[-1] != m3:
        raise C.fail("input_mixes", f"a last dim of mhc_mult*(mhc_mult+2) = {m3}", f"shape {tuple(input_mixes.shape)}")
    C.tensor("mhc_scale", mhc_scale, dtypes=(torch.float32,), shape=(3,))
    C.tensor("mhc_base", mhc_base, dtypes=(torch.float32,), shape=(m3,))
    return MHCPreSplitMixes.apply(input_mixes, mhc_scale, mhc_base, mhc_mult, C.number("mhc_post_mult_value",
                                  mhc_post_mult_value), C.number("mhc_pre_eps", mhc_pre_eps))
