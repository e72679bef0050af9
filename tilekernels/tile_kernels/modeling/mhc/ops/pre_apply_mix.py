import torch

from deepjit import validation as C

from ._forward import apply_mix
from ._grad import accumulate_bf16, handed_over_grad


def apply_mix_fwd(x: torch.Tensor, mix: torch.Tensor, out: torch.Tensor = None) -> torch.Tensor:
    res = apply_mix(x, mix)
    return res if out is None else out.copy_(res)


class MHCPreApplyMix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mix, out):
        ctx.save_for_backward(x, mix)
        return apply_mix_fwd(x, mix, out)

    @staticmethod
    def backward(ctx, o_grad):
        x, mix = ctx.saved_tensors
        g = o_grad.float().unsqueeze(-2)
        mix_grad = (g * x.float()).sum(-1, keepdim=True)
        x_grad = g * mix
        buf = handed_over_grad(x)
        if buf is not None:
            accumulate_bf16(buf.view_as(x), x_grad)
            return None, mix_grad, None
        return x_grad.to(x.dtype), mix_grad, None


def mhc_pre_apply_mix(x: torch.Tensor, mix: torch.Tensor, out: torch.Tensor = None) -> torch.Tensor:
    """``sum_m mix_m * x_m``: residual ``(..., m, H)`` BF16 and mix ``(..., m, 1)`` FP32 -> BF16 ``(..., H)``."""
    C.tensor("x", x, dtypes=(torch.bfloat16,), ndim=range(2, 9), contiguous=True)
    C.tensor("mix", mix, dtypes=(torch.float32,), shape=(*x.shape[:-1], 1))
    C.optional("out", out, dtypes=(torch.bfloat16,), shape=(*x.shape[:-2], x.shape[-1]))
    return MHCPreApplyMix.apply(x, mix, out)
