import torch

from deepjit import validation as C

from ...._dispatch import TABLE
from ...._lib import empty, host_kernel, threads
from ....ascend import mhc_streams as ascend_streams


class ExpandToMHCFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, mhc_mult, out):
        return TABLE.run("expand_to_mhc", hidden.device, hidden, mhc_mult, out)

    @staticmethod
    def backward(ctx, out_grad):
        return out_grad.float().sum(-2).to(out_grad.dtype), None, None


def _expand_ref(hidden, mhc_mult, out):
    if out is None:
        out = hidden.new_empty((*hidden.shape[:-1], mhc_mult, hidden.shape[-1]))
    return out.copy_(hidden.unsqueeze(-2).expand_as(out))


def _expand_host(hidden, mhc_mult, out):
    if out is None:
        out = empty(*hidden.shape[:-1], mhc_mult, hidden.shape[-1], dtype=hidden.dtype)
    if out.numel():
        row_bytes = hidden.shape[-1] * hidden.element_size()
        host_kernel("tk_mhc_expand", "mhc_expand.cpp")(out, hidden, hidden.numel() // hidden.shape[-1], mhc_mult,
                                                     row_bytes, threads())
    return out


TABLE.register("expand_to_mhc", reference=_expand_ref, host=_expand_host, ascend=ascend_streams.expand)


def expand_to_mhc(hidden: torch.Tensor, mhc_mult: int, out: torch.Tensor = None) -> torch.Tensor:
    """``(..., H)`` -> ``(..., mhc_mult, H)`` by broadcasting; backward sums over the copies."""
    C.tensor("hidden", hidden, ndim=range(1, 9), contiguous=True)
    C.integer("mhc_mult", mhc_mult, 1)
    C.optional("out", out, dtypes=(hidden.dtype,), shape=(*hidden.shape[:-1], mhc_mult, hidden.shape[-1]),
               contiguous=True, device=hidden.device)
    if out is not None:
        C.output("out", out, ("hidden", hidden))
    return ExpandToMHCFn.apply(hidden, mhc_mult, out)
