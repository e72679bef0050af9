"""Forward steps of the mHC ops on either path. On CPU the host kernels run the per-token code the
fused mhc_pre_big_fuse kernel shares, so fused and composed results are bitwise equal; elsewhere
the references run. The projection onto ``fn`` is its own FP32 kernel (upstream also runs it as a
separate GEMM before its fused kernel); the shared BF16 GEMM would round fn to BF16."""
from __future__ import annotations

import torch

from deepjit import Impl, descriptors

from ...._dispatch import TABLE
from ...._lib import LIB, empty, host_kernel, threads
from ....ascend import mhc_mix as ascend_mix
from ....ascend import mhc_pre_fuse as ascend_pre_fuse
from ....ascend import mhc_projection as ascend_projection
from ....ascend import mhc_sinkhorn as ascend_sinkhorn
from ....ascend import mhc_streams as ascend_streams
from ....mhc.norm_fn_kernel import tf32_operand
from ....reference.mhc import mhc_head_compute_mix_ref, mhc_pre_split_mixes_ref, sinkhorn_normalize_ref

_NORM, _SPLIT, _SINKHORN, _APPLY, _HEAD_MIX = 0, 1, 2, 3, 4


def _mhc_args(name: str, **fields):
    """The named launch arguments ``name`` of host/mhc_args.hpp."""
    return descriptors.pack(descriptors.struct_type(LIB.source("host/mhc_args.hpp"), name), **fields)


def _op(code, t, m, k, repeat, a, b, scale, base, o1, o2, o3, f1=0.0, f2=0.0, num_threads=None):
    if t:
        args = _mhc_args("MhcOpArgs", op=code, T=t, m=m, K=k, repeat=repeat, a=a, b=b, scale=scale, base=base, o1=o1,
                         o2=o2, o3=o3, f1=float(f1), f2=float(f2))
        host_kernel("tk_mhc_op", "mhc_ops.cpp")(descriptors.address(args),
                                                threads() if num_threads is None else num_threads)


def projection(x: torch.Tensor, fn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mul (..., m3), sqrsum (..., 1)) of the flattened residual, FP32 math."""
    return TABLE.run("mhc_projection", x.device, x, fn)


def _projection_ref(x, fn):
    r = x.flatten(-2).float()
    return r @ fn.T, r.square().sum(-1, keepdim=True)


def _projection_host(x, fn):
    m3, k = fn.shape
    outer = x.shape[:-2]
    t = x.numel() // k if k else 0
    mul, sqrsum = torch.empty(*outer, m3, dtype=torch.float32), torch.empty(*outer, 1, dtype=torch.float32)
    if t:
        host_kernel("tk_mhc_projection", "mhc_projection.cpp")(mul, sqrsum, x.contiguous(), fn.contiguous(), t, k, m3,
                                                              threads())
    return mul, sqrsum


TABLE.register("mhc_projection", reference=_projection_ref, host=_projection_host)


def norm(mul: torch.Tensor, sqrsum: torch.Tensor, k: int, eps: float) -> torch.Tensor:
    return TABLE.run("mhc_norm", mul.device, mul, sqrsum, k, eps)


def _mhc_size(m3: int) -> int:
    return round((1 + m3) ** 0.5) - 1  # m3 = m (m + 2)


def _norm_ref(mul, sqrsum, k, eps):
    return mul * torch.rsqrt(sqrsum / k + eps)


def _norm_host(mul, sqrsum, k, eps):
    m3 = mul.shape[-1]
    m = _mhc_size(m3)
    mul, sqrsum = mul.contiguous(), sqrsum.contiguous()
    out = torch.empty_like(mul)
    _op(_NORM, mul.numel() // m3, m, k, 0, mul, sqrsum, None, None, out, None, None, eps)
    return out


TABLE.register("mhc_norm", reference=_norm_ref,
               host=Impl(_norm_host, "mixes of m (m + 2) values",
                         lambda mul, *_: _mhc_size(mul.shape[-1]) * (_mhc_size(mul.shape[-1]) + 2) == mul.shape[-1]))


def split_mixes(mixes, scale, base, m, post_mult, pre_eps):
    return TABLE.run("mhc_pre_split_mixes", mixes.device, mixes, scale, base, m, post_mult, pre_eps)


def _split_mixes_host(mixes, scale, base, m, post_mult, pre_eps):
    n0, n1 = mixes.shape[:2]
    t = n0 * n1
    f32 = torch.float32
    pre, post, comb = (torch.empty(n0, n1, m, 1, dtype=f32), torch.empty(n0, n1, m, 1, dtype=f32),
                       torch.empty(n0, n1, m, m, dtype=f32))
    _op(_SPLIT, t, m, 0, 0, mixes.contiguous(), None, scale.contiguous(), base.contiguous(), pre, post, comb,
        post_mult, pre_eps)
    return pre, post, comb


TABLE.register("mhc_pre_split_mixes", reference=mhc_pre_split_mixes_ref, host=_split_mixes_host)


def sinkhorn(x: torch.Tensor, repeat: int, eps: float) -> torch.Tensor:
    return TABLE.run("sinkhorn_normalize", x.device, x, repeat, eps)


def _sinkhorn_host(x, repeat, eps):
    x = x.contiguous()
    out = torch.empty_like(x)
    _op(_SINKHORN, x.numel() // (x.shape[-1] ** 2), x.shape[-1], 0, repeat, x, None, None, None, out, None, None, eps)
    return out


TABLE.register("sinkhorn_normalize", reference=sinkhorn_normalize_ref, host=_sinkhorn_host)


def head_mix(input_mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, pre_eps: float) -> torch.Tensor:
    """``sigmoid(input_mix * scale + base) + pre_eps`` over (..., m) mixes."""
    return TABLE.run("mhc_head_compute_mix", input_mix.device, input_mix, scale, base, pre_eps)


def _head_mix_host(input_mix, scale, base, pre_eps):
    m = input_mix.shape[-1]
    out = torch.empty(input_mix.shape, dtype=torch.float32)
    t = input_mix.numel() // m if m else 0
    # a few values per token: one thread, no parallel region to wait on
    _op(_HEAD_MIX, t, m, 0, 0, input_mix.contiguous(), None, scale.contiguous(), base.contiguous(), out, None, None,
        pre_eps, num_threads=1)
    return out


TABLE.register("mhc_head_compute_mix", reference=mhc_head_compute_mix_ref, host=_head_mix_host)


def apply_mix(x: torch.Tensor, mix: torch.Tensor) -> torch.Tensor:
    return TABLE.run("mhc_pre_apply_mix", x.device, x, mix)


def _apply_mix_ref(x, mix):
    return (x.float() * mix).sum(-2).to(torch.bfloat16)


def _apply_mix_host(x, mix):
    m, h = x.shape[-2:]
    out = empty(*x.shape[:-2], h, dtype=torch.bfloat16)
    _op(_APPLY, x.numel() // (m * h), m, h, 0, x.contiguous(), mix.contiguous().float(), None, None, out, None, None)
    return out


TABLE.register("mhc_pre_apply_mix", reference=_apply_mix_ref, host=_apply_mix_host)


def pre_big_fuse(residual, fn, scale, base, rms_eps, pre_eps, sinkhorn_eps, post_mult, repeat):
    """(post (T, m, 1), comb (T, m, m), layer_input (T, H)) for the flattened tokens; ``fn`` rounded to TF32
    as upstream rounds it for its MMA."""
    return TABLE.run("mhc_pre_big_fuse", residual.device, residual, fn, scale, base, rms_eps, pre_eps, sinkhorn_eps,
                     post_mult, repeat)


def _pre_big_fuse_ref(residual, fn, scale, base, rms_eps, pre_eps, sinkhorn_eps, post_mult, repeat):
    """The composed steps (each through the table)."""
    m, h = residual.shape[-2:]
    x = residual.reshape(-1, m, h)
    t = x.shape[0]
    mul, sqrsum = projection(x, tf32_operand(fn))
    mixes = norm(mul, sqrsum, m * h, rms_eps).reshape(1, t, mul.shape[-1])
    pre, post, comb = split_mixes(mixes, scale, base, m, post_mult, pre_eps)
    comb = sinkhorn(comb.reshape(t, m, m), repeat, sinkhorn_eps)
    return post.reshape(t, m, 1), comb, apply_mix(x, pre.reshape(t, m, 1))


def _pre_big_fuse_host(residual, fn, scale, base, rms_eps, pre_eps, sinkhorn_eps, post_mult, repeat):
    m, h = residual.shape[-2:]
    x = residual.reshape(-1, m, h)
    t = x.shape[0]
    mul, sqrsum = _projection_host(x, tf32_operand(fn))
    post, comb = torch.empty(t, m, 1), torch.empty(t, m, m)
    layer_input = empty(t, h, dtype=torch.bfloat16)
    if t:
        args = _mhc_args(
            "MhcPreBigFuseArgs", post=post, comb=comb, layer_input=layer_input, mul=mul.contiguous(),
            sqrsum=sqrsum.contiguous(), scale=scale.contiguous(), base=base.contiguous(), residual=x.contiguous(),
            T=t, m=m, H=h, rms_eps=float(rms_eps), pre_eps=float(pre_eps), sinkhorn_eps=float(sinkhorn_eps),
            post_mult=float(post_mult), repeat=repeat)
        host_kernel("tk_mhc_pre_big_fuse", "mhc_pre_big_fuse.cpp")(descriptors.address(args), threads())
    return post, comb, layer_input


TABLE.register("mhc_pre_big_fuse", reference=_pre_big_fuse_ref, host=_pre_big_fuse_host)


# Ascend columns (TileLang kernels; CPU tensors run them on the twin under TK_BACKEND=ascend)
_STREAMS = ascend_mix.STREAMS
TABLE.add_ascend("mhc_norm", Impl(ascend_mix.norm, f"up to {ascend_mix.TILE} mixes a token", ascend_mix.norm_accepts))
TABLE.add_ascend("mhc_pre_split_mixes", Impl(ascend_mix.split_mixes, _STREAMS, ascend_mix.split_mixes_accepts))
TABLE.add_ascend("sinkhorn_normalize", Impl(ascend_sinkhorn.sinkhorn, f"{_STREAMS} (m x m matrices)",
                                            ascend_sinkhorn.accepts))
TABLE.add_ascend("mhc_head_compute_mix", Impl(ascend_mix.head_mix, _STREAMS, ascend_mix.head_mix_accepts))
TABLE.add_ascend("mhc_pre_apply_mix", Impl(ascend_streams.apply_mix, _STREAMS, ascend_streams.apply_mix_accepts))
TABLE.add_ascend("mhc_projection", Impl(ascend_projection.projection,
                                        f"fn of 1 to {ascend_projection.MAX_MIXES} rows (the cube where K is a multiple "
                                        "of 16, the vector cores otherwise)", ascend_projection.accepts))
TABLE.add_ascend("mhc_pre_big_fuse", Impl(ascend_pre_fuse.pre_big_fuse, _STREAMS, ascend_pre_fuse.accepts))
