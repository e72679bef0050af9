import torch

from deepjit import validation as C

from ....mhc.norm_fn_kernel import tf32_operand
from ._forward import norm, projection
from ._grad import GRAD_ATTR, accumulate_bf16, handed_over_grad


class _MHCFnNormwMerge(torch.autograd.Function):
    """``fn * normw``; a parameter with ``.main_grad`` accumulates its gradient there (None returned)."""

    @staticmethod
    def forward(ctx, fn, normw):
        ctx.save_for_backward(fn, normw)
        return fn * normw

    @staticmethod
    def backward(ctx, g):
        fn, normw = ctx.saved_tensors
        grads = []
        for p, d in ((fn, g * normw), (normw, (g * fn).sum(0))):
            main = getattr(p, "main_grad", None)
            if main is not None:
                main.add_(d)
                grads.append(None)
            else:
                grads.append(d)
        return tuple(grads)


class MHCPreNormFn(torch.autograd.Function):
    """``out_j = <r, fn_j> * rsqrt(mean(r^2) + eps)`` for the flattened FP32 residual r. As upstream, whose
    kernels run TF32 MMAs, the forward reads ``fn`` rounded to TF32 and the backward's two products read
    that ``fn`` and the gradient of the projections rounded to TF32 (the norm term stays FP32)."""

    @staticmethod
    def forward(ctx, x, fn, norm_eps, fuse_grad_acc):
        fn = tf32_operand(fn)
        mul, sqrsum = projection(x, fn)
        out = norm(mul, sqrsum, fn.shape[1], norm_eps)
        ctx.save_for_backward(x, fn, mul, sqrsum)
        ctx.norm_eps, ctx.fuse_grad_acc = norm_eps, fuse_grad_acc
        return out

    @staticmethod
    def backward(ctx, g):
        x, fn, mul, sqrsum = ctx.saved_tensors
        k = fn.shape[1]
        r = x.flatten(-2).float()
        rs = torch.rsqrt(sqrsum / k + ctx.norm_eps)
        d_mul = tf32_operand(g * rs)
        d_sqrsum = (g * mul).sum(-1, keepdim=True) * (-0.5) * rs.pow(3) / k
        d_r = d_mul @ fn + 2 * r * d_sqrsum
        d_fn = d_mul.reshape(-1, fn.shape[0]).T @ r.reshape(-1, k)
        buf = handed_over_grad(x) if ctx.fuse_grad_acc else None
        if buf is not None:
            accumulate_bf16(buf.view_as(x), d_r)
            delattr(x.untyped_storage(), GRAD_ATTR)
            return None, d_fn, None, None
        return d_r.view_as(x).to(x.dtype), d_fn, None, None


def mhc_pre_norm_fn(residual: torch.Tensor, mhc_fn: torch.Tensor, mhc_norm_weight, mhc_norm_eps: float,
                    fuse_grad_acc: bool = True, n_splits: int = 16) -> torch.Tensor:
    """RMS-normalised projections of the flattened residual ``(..., m, H)`` onto ``mhc_fn (m3, m*H)``."""
    C.tensor("residual", residual, dtypes=(torch.bfloat16,), ndim=range(3, 9), contiguous=True)
    m, h = residual.shape[-2:]
    C.tensor("mhc_fn", mhc_fn, dtypes=(torch.float32,), ndim=2)
    if mhc_fn.shape[1] != m * h:
        raise C.fail("mhc_fn", f"{m * h} columns (mhc_mult * hidden)", f"shape {tuple(mhc_fn.shape)}")
    C.optional("mhc_norm_weight", mhc_norm_weight, dtypes=(torch.float32,), shape=(m * h,))
    C.number("mhc_norm_eps", mhc_norm_eps)
    C.integer("n_splits", n_splits, 1)
    if mhc_norm_weight is not None:
        mhc_fn = _MHCFnNormwMerge.apply(mhc_fn, mhc_norm_weight)
    return MHCPreNormFn.apply(residual, mhc_fn, mhc_norm_eps, fuse_grad_acc)
