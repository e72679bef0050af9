import torch

from deepjit import validation as C

from ....reference.mhc import sinkhorn_normalize_ref
from ._forward import sinkhorn
from ._grad import recompute_grads


class _SinkhornNormalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, repeat, eps):
        ctx.save_for_backward(x)
        ctx.repeat, ctx.eps = repeat, eps
        return sinkhorn(x, repeat, eps)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        gx, _, _ = recompute_grads(sinkhorn_normalize_ref, (x, ctx.repeat, ctx.eps), (grad_output,))
        return gx, None, None


def sinkhorn_normalize(x: torch.Tensor, repeat: int = 10, eps: float = 1e-6) -> torch.Tensor:
    """Softmax over the last dim, then alternating column / row normalisation of ``(..., m, m)``."""
    C.tensor("x", x, dtypes=(torch.float32,), ndim=range(2, 9))
    if x.shape[-1] != x.shape[-2]:
        raise C.fail("x", "a square (m, m) matrix in the last two dims", f"shape {tuple(x.shape)}")
    C.integer("repeat", repeat, 1)
    C.number("eps", eps)
    return _SinkhornNormalize.apply(x, repeat, eps)
