import torch

from deepjit import Impl, descriptors
from deepjit import validation as C

from ...._dispatch import TABLE
from ...._lib import LIB, empty, host_kernel, threads
from ....ascend import mhc_mix as ascend_mix
from ....ascend import mhc_post_bwd as ascend_post_bwd
from ....ascend import mhc_streams as ascend_streams
from ....reference.mhc import mhc_post_ref
from ._grad import GRAD_ATTR


def _check(x, residual, post_layer_mix, comb_res_mix):
    C.tensor("residual", residual, dtypes=(torch.bfloat16,), ndim=4)
    s, t, m, h = residual.shape
    C.tensor("x", x, dtypes=(torch.bfloat16,), shape=(s, t, h))
    C.tensor("post_layer_mix", post_layer_mix, dtypes=(torch.float32,), shape=(s, t, m, 1))
    C.tensor("comb_res_mix", comb_res_mix, dtypes=(torch.float32,), shape=(s, t, m, m))


def mhc_post_fwd(x, residual, post_layer_mix, comb_res_mix, out=None):
    """``out[n] = post[n] * x + sum_i comb[i, n] * residual[i]`` (FP32 -> BF16)."""
    _check(x, residual, post_layer_mix, comb_res_mix)
    C.optional("out", out, dtypes=(torch.bfloat16,), shape=tuple(residual.shape), device=residual.device)
    C.same_device(x=x, residual=residual, post_layer_mix=post_layer_mix, comb_res_mix=comb_res_mix)
    if out is not None:
        C.output("out", out, ("x", x), ("residual", residual), ("post_layer_mix", post_layer_mix),
                 ("comb_res_mix", comb_res_mix))
    return TABLE.run("mhc_post", residual.device, x, residual, post_layer_mix, comb_res_mix, out)


def _post_ref(x, residual, post_layer_mix, comb_res_mix, out):
    res = mhc_post_ref(x, residual, post_layer_mix, comb_res_mix)
    return res if out is None else out.copy_(res)


def _post_host(x, residual, post_layer_mix, comb_res_mix, out):
    s, t, m, h = residual.shape
    res = out if out is not None and out.is_contiguous() else empty(s, t, m, h, dtype=torch.bfloat16)
    if res.numel():
        host_kernel("tk_mhc_post", "mhc_post.cpp")(res, x.contiguous(), residual.contiguous(),
                                                   post_layer_mix.contiguous(), comb_res_mix.contiguous(), s * t, m, h,
                                                   threads())
    return res if out is None or res is out else out.copy_(res)


TABLE.register("mhc_post", reference=_post_ref, host=_post_host)
TABLE.add_ascend("mhc_post", Impl(ascend_streams.post, ascend_mix.STREAMS, ascend_streams.post_accepts))


def mhc_post_bwd(x, residual, post_layer_mix, comb_res_mix, d_o, fuse_grad_acc: bool = True):
    """Returns ``(d_x, d_residual, d_post_layer_mix, d_comb_res_mix)``; with ``fuse_grad_acc`` the
    residual gradient is also left on the residual's storage for the mHC pre ops to add into."""
    _check(x, residual, post_layer_mix, comb_res_mix)
    C.tensor("d_o", d_o, dtypes=(torch.bfloat16, torch.float32), shape=tuple(residual.shape))
    C.same_device(x=x, residual=residual, post_layer_mix=post_layer_mix, comb_res_mix=comb_res_mix, d_o=d_o)
    d_x, d_residual, d_post, d_comb = TABLE.run("mhc_post_bwd", residual.device, x, residual, post_layer_mix,
                                                comb_res_mix, d_o)
    if fuse_grad_acc:
        setattr(residual.untyped_storage(), GRAD_ATTR, d_residual)
    return d_x, d_residual, d_post, d_comb


def _post_bwd_ref(x, residual, post_layer_mix, comb_res_mix, d_o, acc_dtype=torch.float32):
    """``acc_dtype``: the sums' precision (upstream's FP32; float64 gives the exact sums ascend-check holds
    the Ascend kernel's width sums to)."""
    g = d_o.to(acc_dtype)
    d_x = (g * post_layer_mix).sum(-2).to(x.dtype)
    d_post = (g * x.to(acc_dtype).unsqueeze(-2)).sum(-1, keepdim=True)
    d_comb = torch.einsum("abnc,abmc->abmn", g, residual.to(acc_dtype))
    d_residual = torch.einsum("abmn,abnc->abmc", comb_res_mix.to(acc_dtype), g).to(residual.dtype)
    return d_x, d_residual, d_post, d_comb


def _post_bwd_host(x, residual, post_layer_mix, comb_res_mix, d_o):
    s, t, m, h = residual.shape
    d_x, d_residual = torch.empty(s, t, h, dtype=torch.bfloat16), torch.empty(s, t, m, h, dtype=torch.bfloat16)
    d_post, d_comb = torch.empty(s, t, m, 1), torch.empty(s, t, m, m)
    d_o = d_o.contiguous()
    if residual.numel():
        args = descriptors.pack(
            descriptors.struct_type(LIB.source("host/mhc_post_args.hpp"), "MhcPostBwdArgs"),
            d_x=d_x, d_residual=d_residual, d_post=d_post, d_comb=d_comb, x=x.contiguous(),
            residual=residual.contiguous(), post=post_layer_mix.contiguous(), comb=comb_res_mix.contiguous(),
            d_o=d_o, d_o_bf16=int(d_o.dtype == torch.bfloat16), T=s * t, m=m, H=h)
        host_kernel("tk_mhc_post_bwd", "mhc_post_bwd.cpp")(descriptors.address(args), threads())
    else:  # no tokens, or zero width: the width sums are empty
        d_post.zero_()
        d_comb.zero_()
    return d_x, d_residual, d_post, d_comb


TABLE.register("mhc_post_bwd", reference=_post_bwd_ref, host=_post_bwd_host,
               ascend=Impl(ascend_post_bwd.post_bwd, ascend_mix.STREAMS, ascend_post_bwd.accepts))


class MHCPost(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, post_layer_mix, comb_res_mix, out):
        ctx.save_for_backward(x, residual, post_layer_mix, comb_res_mix)
        return mhc_post_fwd(x, residual, post_layer_mix, comb_res_mix, out)

    @staticmethod
    def backward(ctx, d_o):
        return (*mhc_post_bwd(*ctx.saved_tensors, d_o), None)


def mhc_post(x, residual, post_layer_mix, comb_res_mix, out=None):
    return MHCPost.apply(x, residual, post_layer_mix, comb_res_mix, out)
