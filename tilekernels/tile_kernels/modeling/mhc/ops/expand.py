import torch

from .... import _checks as C


class ExpandToMHCFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, mhc_mult, out):
        if out is None:
            out = hidden.new_empty(*hidden.shape[:-1], mhc_mult, hidden.shape[-1])
        out.copy_(hidden.unsqueeze(-2).expand_as(out))
        return out

    @staticmethod
    def backward(ctx, out_grad):
        return out_grad.float().sum(-2).to(out_grad.dtype), None, None


def expand_to_mhc(hidden: torch.Tensor, mhc_mult: int, out: torch.Tensor = None) -> torch.Tensor:
    """``(..., H)`` -> ``(..., mhc_mult, H)`` by broadcasting; backward sums over the copies."""
    C.tensor("hidden", hidden, ndim=range(1, 9), contiguous=True)
    C.integer("mhc_mult", mhc_mult, 1)
    C.optional("out", out, dtypes=(hidden.dtype,), shape=(*hidden.shape[:-1], mhc_mult, hidden.shape[-1]),
               contiguous=True)
    return ExpandToMHCFn.apply(hidden, mhc_mult, out)
