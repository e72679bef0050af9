import torch

from deepjit import validation as C

from ....reference.mhc import mhc_head_compute_mix_ref
from ._forward import head_mix
from ._grad import recompute_grads


class MHCHeadComputeMix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_mix, mhc_scale, mhc_base, pre_eps):
        ctx.save_for_backward(input_mix, mhc_scale, mhc_base)
        ctx.pre_eps = pre_eps
        return head_mix(input_mix, mhc_scale, mhc_base, pre_eps)

    @staticmethod
    def backward(ctx, g):
        gi, gs, gb, _ = recompute_grads(mhc_head_compute_mix_ref, (*ctx.saved_tensors, ctx.pre_eps), (g,))
        return gi, gs, gb, None


def mhc_head_compute_mix(input_mix: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor,
                         mhc_pre_eps: float) -> torch.Tensor:
    """``sigmoid(input_mix * scale + base) + pre_eps`` for ``(n0, n1, m)`` mixes."""
    C.tensor("input_mix", input_mix, dtypes=(torch.float32,), ndim=3)
    m = input_mix.shape[-1]
    C.tensor("mhc_scale", mhc_scale, dtypes=(torch.float32,), shape=(1,))
    C.tensor("mhc_base", mhc_base, dtypes=(torch.float32,), shape=(m,))
    C.same_device(input_mix=input_mix, mhc_scale=mhc_scale, mhc_base=mhc_base)
    return MHCHeadComputeMix.apply(input_mix, mhc_scale, mhc_base, C.number("mhc_pre_eps", mhc_pre_eps))
