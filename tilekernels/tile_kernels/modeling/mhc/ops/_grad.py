"""Shared helpers of the mHC autograd functions."""
import torch

GRAD_ATTR = "grad_from_mhc_post"


def handed_over_grad(t: torch.Tensor):
    """The residual gradient mhc_post's backward left on ``t``'s storage, or None."""
    return getattr(t.untyped_storage(), GRAD_ATTR, None)


def accumulate_bf16(buf: torch.Tensor, delta: torch.Tensor) -> None:
    """``buf += delta`` with FP32 math and a BF16 store, in place."""
    buf.copy_((buf.float() + delta.view(buf.shape)).to(buf.dtype))


def recompute_grads(fn, inputs, grads):
    """Gradients of ``fn(*inputs)`` by re-running it under autograd (inputs that need none get None)."""
    with torch.enable_grad():
        leaves = [x.detach().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                  for x in inputs]
        outs = fn(*leaves)
        outs = outs if isinstance(outs, tuple) else (outs,)
        pairs = [(o, g) for o, g in zip(outs, grads, strict=False) if g is not None and o.requires_grad]
        wrt = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
        res = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True)
    it = iter(res)
    return [next(it) if isinstance(x, torch.Tensor) and x.requires_grad else None for x in leaves]
