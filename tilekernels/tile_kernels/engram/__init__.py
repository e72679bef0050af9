"""Engram: n-gram hashing and the fused RMS-normalised gate (forward, backward, weight reduction)."""
from __future__ import annotations

import torch

from deepjit import Impl, descriptors
from deepjit import validation as C

from .._dispatch import TABLE
from .._lib import LIB, empty, host_kernel, threads
from ..ascend import engram as ascend_engram
from ..config import get_num_sms
from ..reference import engram as ref

__all__ = ["fused_weight", "engram_gate_fwd", "engram_gate_bwd", "grad_w_reduce", "engram_hash"]


def engram_hash(ngram_token_ids: torch.Tensor, multipliers: torch.Tensor, vocab_sizes: torch.Tensor,
                offsets: torch.Tensor) -> torch.Tensor:
    """int32 (L, T, (N-1)*M) embedding rows of every token's n-grams (see reference.engram)."""
    C.tensor("ngram_token_ids", ngram_token_ids, dtypes=(torch.int32,), ndim=2, contiguous=True)
    t, n = ngram_token_ids.shape
    if n < 2:
        raise C.fail("ngram_token_ids", "at least 2 columns (the max n-gram size)", f"shape {tuple(ngram_token_ids.shape)}")
    C.tensor("multipliers", multipliers, dtypes=(torch.int64,), ndim=2, contiguous=True)
    if multipliers.shape[1] != n:
        raise C.fail("multipliers", f"shape (L, {n})", tuple(multipliers.shape))
    num_layers = multipliers.shape[0]
    C.tensor("vocab_sizes", vocab_sizes, dtypes=(torch.int32,), ndim=3, contiguous=True)
    if vocab_sizes.shape[:2] != (num_layers, n - 1):
        raise C.fail("vocab_sizes", f"shape ({num_layers}, {n - 1}, M)", tuple(vocab_sizes.shape))
    m = vocab_sizes.shape[2]
    C.tensor("offsets", offsets, dtypes=(torch.int32,), shape=(num_layers, (n - 1) * m), contiguous=True)
    # no host read of a device tensor (graph capture): the Ascend kernel writes the offset for vocab sizes <= 0
    if vocab_sizes.device.type == "cpu" and vocab_sizes.numel() and int(vocab_sizes.min()) <= 0:
        raise C.fail("vocab_sizes", "positive entries", f"min {int(vocab_sizes.min())}")
    return TABLE.run("engram_hash", ngram_token_ids.device, ngram_token_ids, multipliers, vocab_sizes, offsets)


def _engram_hash_host(ngram_token_ids, multipliers, vocab_sizes, offsets):
    t, n = ngram_token_ids.shape
    num_layers, m = multipliers.shape[0], vocab_sizes.shape[2]
    out = torch.empty((num_layers, t, (n - 1) * m), dtype=torch.int32)
    if out.numel():
        host_kernel("tk_engram_hash", "engram_hash.cpp")(out, ngram_token_ids, multipliers, vocab_sizes, offsets,
                                                        num_layers, t, n, m, threads())
    return out


TABLE.register("engram_hash", reference=ref.engram_hash_ref, host=_engram_hash_host)


def fused_weight(weight_hidden: torch.Tensor, weight_embed: torch.Tensor) -> torch.Tensor:
    """FP32 ``weight_hidden * weight_embed`` (hc, H)."""
    C.tensor("weight_hidden", weight_hidden, dtypes=(torch.bfloat16, torch.float32), ndim=2)
    C.tensor("weight_embed", weight_embed, dtypes=(torch.bfloat16, torch.float32), shape=tuple(weight_hidden.shape))
    C.same_device(weight_hidden=weight_hidden, weight_embed=weight_embed)
    return TABLE.run("fused_weight", weight_hidden.device, weight_hidden, weight_embed)


def _fused_weight_host(weight_hidden, weight_embed):
    wh, we = weight_hidden.contiguous(), weight_embed.contiguous()
    out = torch.empty(wh.shape, dtype=torch.float32)
    if wh.numel():
        host_kernel("tk_engram_fused_weight", "engram_fused_weight.cpp")(
            wh, int(wh.dtype == torch.bfloat16), we, int(we.dtype == torch.bfloat16), out, wh.numel(), threads())
    return out


TABLE.register("fused_weight", reference=ref.fused_weight, host=_fused_weight_host)


def _args(name: str, **fields):
    """The named launch arguments ``name`` of host/engram_args.hpp."""
    return descriptors.pack(descriptors.struct_type(LIB.source("host/engram_args.hpp"), name), **fields)


def _strides(x, k, v) -> dict:
    return {"x_t": x.stride(0), "x_h": x.stride(1), "k_t": k.stride(0), "k_h": k.stride(1), "v_t": v.stride(0)}


def _check_gate(hidden_states, k, v, weight_fused):
    C.tensor("hidden_states", hidden_states, dtypes=(torch.bfloat16,), ndim=3, last_stride_one=True)
    t, hc, h = hidden_states.shape
    C.tensor("k", k, dtypes=(torch.bfloat16,), shape=(t, hc, h), last_stride_one=True)
    C.tensor("v", v, dtypes=(torch.bfloat16,), shape=(t, h), last_stride_one=True)
    C.tensor("weight_fused", weight_fused, dtypes=(torch.float32,), shape=(hc, h))


def engram_gate_fwd(hidden_states: torch.Tensor, k: torch.Tensor, v: torch.Tensor, weight_fused: torch.Tensor,
                    eps: float, clamp_value: float, save_for_backward: bool = True):
    """Returns ``(out, dot, gate_score, rstd_x, rstd_k)``; the last four are None unless saved."""
    _check_gate(hidden_states, k, v, weight_fused)
    C.number("eps", eps)
    C.number("clamp_value", clamp_value)
    return TABLE.run("engram_gate_fwd", hidden_states.device, hidden_states, k, v, weight_fused, eps, clamp_value,
                     save_for_backward)


def _engram_gate_fwd_host(hidden_states, k, v, weight_fused, eps, clamp_value, save_for_backward):
    t, hc, h = hidden_states.shape
    out = empty(t, hc, h, dtype=torch.bfloat16)
    saved = [torch.empty(t, hc, dtype=torch.float32) for _ in range(4)] if save_for_backward else [None] * 4
    if out.numel():
        args = _args("EngramGateFwdArgs", out=out, dot=saved[0], gate=saved[1], rstd_x=saved[2], rstd_k=saved[3],
                     x=hidden_states, k=k, v=v, w=weight_fused.contiguous(), T=t, HC=hc, H=h,
                     **_strides(hidden_states, k, v), eps=float(eps), clamp=float(clamp_value))
        host_kernel("tk_engram_gate_fwd", "engram_gate_fwd.cpp")(descriptors.address(args), threads())
    return (out, *saved)


TABLE.register("engram_gate_fwd", reference=ref.engram_gate_fwd, host=_engram_gate_fwd_host)


def engram_gate_bwd(grad_out, hidden_states, k, v, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value):
    """Returns ``(grad_x, grad_k, grad_v, grad_w_partial (get_num_sms(), hc, H))``."""
    _check_gate(hidden_states, k, v, weight_fused)
    t, hc, h = hidden_states.shape
    C.tensor("grad_out", grad_out, dtypes=(torch.bfloat16,), shape=(t, hc, h))
    for name, s in (("dot", dot), ("gate_score", gate_score), ("rstd_x", rstd_x), ("rstd_k", rstd_k)):
        C.tensor(name, s, dtypes=(torch.float32,), shape=(t, hc))
    C.number("clamp_value", clamp_value)
    num_blocks = get_num_sms()
    return TABLE.run("engram_gate_bwd", hidden_states.device, grad_out, hidden_states, k, v, weight_fused, dot,
                     gate_score, rstd_x, rstd_k, clamp_value, num_blocks)


def _engram_gate_bwd_host(grad_out, hidden_states, k, v, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
                          num_blocks):
    t, hc, h = hidden_states.shape
    grad_x, grad_k = empty(t, hc, h, dtype=torch.bfloat16), empty(t, hc, h, dtype=torch.bfloat16)
    grad_v = torch.empty(t, h, dtype=torch.bfloat16)
    partial = torch.empty(num_blocks, hc, h, dtype=torch.float32)  # the kernel zeroes each block before accumulating
    if grad_x.numel():
        args = _args("EngramGateBwdArgs", grad_x=grad_x, grad_k=grad_k, grad_v=grad_v, partial=partial,
                     grad_out=grad_out.contiguous(), x=hidden_states, k=k, v=v, w=weight_fused.contiguous(),
                     dot=dot.contiguous(), gate=gate_score.contiguous(), rstd_x=rstd_x.contiguous(),
                     rstd_k=rstd_k.contiguous(), T=t, HC=hc, H=h, **_strides(hidden_states, k, v),
                     clamp=float(clamp_value), num_blocks=num_blocks)
        host_kernel("tk_engram_gate_bwd", "engram_gate_bwd.cpp")(descriptors.address(args), threads())
    return grad_x, grad_k, grad_v, partial


TABLE.register("engram_gate_bwd", reference=ref.engram_gate_bwd, host=_engram_gate_bwd_host)


def grad_w_reduce(grad_w_partial: torch.Tensor, weight_hidden: torch.Tensor, weight_embed: torch.Tensor,
                  grad_weight_hidden: torch.Tensor, grad_weight_embed: torch.Tensor) -> None:
    """In place: ``s = grad_w_partial.sum(0)``; ``grad_wh += s * we``; ``grad_we += s * wh``."""
    C.tensor("grad_w_partial", grad_w_partial, dtypes=(torch.float32,), ndim=3)
    shape = tuple(grad_w_partial.shape[1:])
    C.tensor("weight_hidden", weight_hidden, dtypes=(torch.bfloat16, torch.float32), shape=shape)
    C.tensor("weight_embed", weight_embed, dtypes=(torch.bfloat16, torch.float32), shape=shape)
    C.tensor("grad_weight_hidden", grad_weight_hidden, dtypes=(torch.float32,), shape=shape)
    C.tensor("grad_weight_embed", grad_weight_embed, dtypes=(torch.float32,), shape=shape)
    C.same_device(grad_w_partial=grad_w_partial, weight_hidden=weight_hidden, weight_embed=weight_embed,
                  grad_weight_hidden=grad_weight_hidden, grad_weight_embed=grad_weight_embed)
    inputs = (("grad_w_partial", grad_w_partial), ("weight_hidden", weight_hidden), ("weight_embed", weight_embed))
    C.output("grad_weight_hidden", grad_weight_hidden, *inputs, ("grad_weight_embed", grad_weight_embed))
    C.output("grad_weight_embed", grad_weight_embed, *inputs)
    TABLE.run("grad_w_reduce", grad_w_partial.device, grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden,
              grad_weight_embed)


def _grad_w_reduce_host(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed):
    if grad_w_partial.shape[0] == 0:  # an empty sum adds zeros
        return
    wh, we = weight_hidden.contiguous(), weight_embed.contiguous()
    host_kernel("tk_engram_grad_w", "engram_grad_w.cpp")(
        grad_w_partial.contiguous(), grad_w_partial.shape[0], wh, int(wh.dtype == torch.bfloat16), we,
        int(we.dtype == torch.bfloat16), grad_weight_hidden, grad_weight_embed, wh.numel(), threads())


def _outputs_contiguous(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed) -> bool:
    return grad_weight_hidden.is_contiguous() and grad_weight_embed.is_contiguous()


TABLE.register("grad_w_reduce", reference=ref.grad_w_reduce,
               host=Impl(_grad_w_reduce_host, "contiguous gradient outputs", _outputs_contiguous))


# Ascend column (TileLang kernels in ascend/engram.py)
TABLE.add_ascend("fused_weight", Impl(ascend_engram.fused_weight, "BF16/FP32 weights"))
TABLE.add_ascend("grad_w_reduce", Impl(ascend_engram.grad_w_reduce, "contiguous gradient outputs",
                                       _outputs_contiguous))
TABLE.add_ascend("engram_gate_fwd", Impl(ascend_engram.engram_gate_fwd, "hidden size > 0, hc <= 64 (others: the "
                                         "reference)", ascend_engram.gate_fits))
TABLE.add_ascend("engram_gate_bwd", Impl(ascend_engram.engram_gate_bwd, "hc <= 64 (more: the reference)",
                                         lambda grad_out, hidden_states, *_: hidden_states.shape[1] <= ascend_engram.MAX_HC))
TABLE.add_ascend("engram_hash", Impl(ascend_engram.engram_hash, "L x (N-1) x M tables up to 16 Ki entries "
                                     "(larger: the reference)", ascend_engram.hash_fits))
