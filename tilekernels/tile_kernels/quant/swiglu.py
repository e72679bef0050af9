"""SwiGLU fused with E4M3 casts: forward + per-token cast, backward + per-token cast of the input
gradient, and forward + per-channel cast (+ transpose)."""
from __future__ import annotations

import torch

from deepjit import Impl, descriptors
from deepjit import validation as C

from .._dispatch import TABLE
from .._lib import LIB, empty, host_kernel, threads
from ..ascend import block_cast as ascend_cast
from ..ascend import channel_cast as ascend_channel_cast
from ..ascend import swiglu_backward as ascend_swiglu_bwd
from ..host import cast as host_cast
from ..reference import cast as ref_cast
from ..reference import swiglu as ref
from ..reference.transpose import transpose as transpose_ref
from ..transpose import transpose_host
from .common import alloc_sf, sf_strides


def _args(name: str, **fields):
    """The named launch arguments ``name`` of host/swiglu_args.hpp."""
    return descriptors.pack(descriptors.struct_type(LIB.source("host/swiglu_args.hpp"), name), **fields)


def _check_routing(p2tt, topk_weights, p2e, rows: int, name_w: str = "topk_weights"):
    if (p2tt is None) != (topk_weights is None):
        missing, given = (name_w, "pos_to_token_topk") if topk_weights is None else ("pos_to_token_topk", name_w)
        raise C.fail(missing, f"a tensor ({given} is given: the two go together)", None)
    if p2tt is not None:
        C.tensor("pos_to_token_topk", p2tt, dtypes=(torch.int32,), shape=(rows,), contiguous=True)
        C.tensor(name_w, topk_weights, dtypes=(torch.float32,), ndim=2, contiguous=True)
        # no host read of a device tensor (graph capture): the Ascend kernels weight an entry outside
        # [0, topk_weights.numel()) by 0 and write no weight gradient for it, as -1
        if p2tt.numel() and p2tt.device.type == "cpu":
            lo, hi = int(p2tt.min()), int(p2tt.max())
            if lo < -1 or hi >= topk_weights.numel():
                raise C.fail("pos_to_token_topk", f"entries in [-1, {topk_weights.numel()}) (-1 or an index into "
                             f"{name_w})", f"values in [{lo}, {hi}]")
    if p2e is not None:
        C.tensor("pos_to_expert", p2e, dtypes=(torch.int32,), shape=(rows,), contiguous=True)


def _clamp_arg(swiglu_clamp_value):
    if swiglu_clamp_value is None:
        return None
    c = C.number("swiglu_clamp_value", swiglu_clamp_value)
    if not c > 0:
        raise C.fail("swiglu_clamp_value", "a positive number", c)
    return c


def swiglu_forward_and_per_token_cast(x: torch.Tensor, fmt: str, num_per_channels: int,
                                      pos_to_token_topk: torch.Tensor | None = None,
                                      topk_weights: torch.Tensor | None = None,
                                      pos_to_expert: torch.Tensor | None = None,
                                      use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                                      use_packed_ue8m0: bool = False, swiglu_clamp_value: float | None = None,
                                      clamped_count: torch.Tensor | None = None,
                                      sf_clamp_min: float | None = None):
    """``y = silu(a) * b`` (times the row's routing weight) for ``x = [a | b]``, cast to E4M3 with one
    scale per ``num_per_channels`` channels. Rows with ``pos_to_expert == -1`` are left unspecified."""
    C.choice("fmt", fmt, ("e4m3",))
    C.tensor("x", x, dtypes=(torch.bfloat16, torch.float32), ndim=2, contiguous=True)
    rows, h2 = x.shape
    if h2 % 256:
        raise C.fail("x", "a width 2*H with H % 128 == 0", f"shape {tuple(x.shape)}")
    h = h2 // 2
    C.integer("num_per_channels", num_per_channels, 1)
    if num_per_channels not in (128, h):
        raise C.fail("num_per_channels", f"128 or H ({h})", num_per_channels)
    if use_tma_aligned_col_major_sf and num_per_channels != 128:
        raise C.fail("use_tma_aligned_col_major_sf", "False unless num_per_channels == 128",
                     f"{use_tma_aligned_col_major_sf!r} with num_per_channels={num_per_channels}")
    if use_packed_ue8m0 and not use_tma_aligned_col_major_sf:
        raise C.fail("use_packed_ue8m0", "False unless use_tma_aligned_col_major_sf=True",
                     f"{use_packed_ue8m0!r} with use_tma_aligned_col_major_sf={use_tma_aligned_col_major_sf!r}")
    _check_routing(pos_to_token_topk, topk_weights, pos_to_expert, rows)
    clamp = _clamp_arg(swiglu_clamp_value)
    if clamped_count is not None:
        C.tensor("clamped_count", clamped_count, dtypes=(torch.int64,), shape=(3,), contiguous=True)
        if clamp is None:
            raise C.fail("clamped_count", "None unless swiglu_clamp_value is given", "a tensor with "
                         "swiglu_clamp_value=None")
    clamp_min = None if sf_clamp_min is None else C.number("sf_clamp_min", sf_clamp_min)
    return TABLE.run("swiglu_forward_and_per_token_cast", x.device, x, num_per_channels, pos_to_token_topk,
                     topk_weights, pos_to_expert, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, clamp,
                     clamped_count, clamp_min)


def _fwd_cast_ref(x, num_per_channels, pos_to_token_topk, topk_weights, pos_to_expert, use_tma_aligned_col_major_sf,
                  round_sf, use_packed_ue8m0, clamp, clamped_count, clamp_min):
    y = ref.swiglu_forward(x, pos_to_token_topk, topk_weights, clamp, clamped_count)
    return ref_cast.cast(y, "e4m3", (1, num_per_channels), round_sf=round_sf,
                         use_tma_aligned_col_major_sf=use_tma_aligned_col_major_sf,
                         use_packed_ue8m0=use_packed_ue8m0, clamp_min=clamp_min)


def _fwd_cast_host(x, num_per_channels, pos_to_token_topk, topk_weights, pos_to_expert, use_tma_aligned_col_major_sf,
                   round_sf, use_packed_ue8m0, clamp, clamped_count, clamp_min):
    rows, h = x.shape[0], x.shape[1] // 2
    q = empty(rows, h, dtype=torch.float8_e4m3fn)
    sf = alloc_sf(rows, -(-h // num_per_channels), use_tma_aligned_col_major_sf, use_packed_ue8m0, x.device)
    if rows:
        packed, sm, sk = sf_strides(sf)
        args = _args("SwigluFwdCastArgs", q=q, sf=sf, y_out=None, x=x, dt=int(x.dtype == torch.bfloat16), P=rows, H=h,
                     npc=num_per_channels, p2tt=pos_to_token_topk, weights=topk_weights, p2e=pos_to_expert,
                     has_clamp=clamp is not None, clamp=clamp or 0.0, counts=clamped_count, round_sf=bool(round_sf),
                     clamp_min=1e-4 if clamp_min is None else clamp_min, packed=bool(packed), sm=sm, sk=sk)
        host_kernel("tk_swiglu_fwd_cast", "swiglu_fwd_cast.cpp")(descriptors.address(args), threads())
    return q, sf


def _fwd_cast_ascend(x, num_per_channels, pos_to_token_topk, topk_weights, pos_to_expert,
                     use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, clamp, clamped_count, clamp_min):
    return ascend_cast.swiglu_forward_and_per_token_cast(x, num_per_channels, pos_to_token_topk, topk_weights,
                                                         use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0,
                                                         clamp, clamp_min)


TABLE.register("swiglu_forward_and_per_token_cast", reference=_fwd_cast_ref, host=_fwd_cast_host,
               ascend=Impl(_fwd_cast_ascend, "no clamped_count; int16 packed UE8M0 scales (the Ascend form)",
                           lambda *args: args[9] is None))


def swiglu_backward_and_per_token_cast(x, grad_out: torch.Tensor, weight: torch.Tensor,
                                       pos_to_token_topk: torch.Tensor, token_topk_to_pos: torch.Tensor,
                                       num_per_channels: int, round_sf: bool = False,
                                       swiglu_clamp_value: float | None = None):
    """Returns ``(out, (x_grad_q, x_grad_sf), x_grad, weight_grad)`` for E4M3 ``x = (q, sf)``."""
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise C.fail("x", "an E4M3 (data, sf) pair", f"a {type(x).__name__} of length {len(x)}"
                     if isinstance(x, (tuple, list)) else type(x).__name__, TypeError)
    q, sf = x
    C.tensor("x[0]", q, dtypes=(torch.float8_e4m3fn,), ndim=(2, 3), contiguous=True)
    C.choice("num_per_channels", num_per_channels, (32, 128))
    h2 = q.shape[-1]
    if h2 % (2 * num_per_channels):
        raise C.fail("x[0]", f"a width 2*H with H % num_per_channels ({num_per_channels}) == 0",
                     f"shape {tuple(q.shape)}")
    h = h2 // 2
    rows = q.numel() // h2 if h2 else 0
    C.tensor("x[1]", sf, dtypes=(torch.float32,), shape=(rows, h2 // num_per_channels), contiguous=True)
    C.tensor("grad_out", grad_out, dtypes=(torch.bfloat16, torch.float32), contiguous=True)
    if grad_out.numel() != rows * h or grad_out.shape[-1] != h:
        raise C.fail("grad_out", f"({rows}, {h}) values (last dim {h})", f"shape {tuple(grad_out.shape)}")
    C.tensor("token_topk_to_pos", token_topk_to_pos, dtypes=(torch.int32,), ndim=2, contiguous=True)
    C.tensor("weight", weight, dtypes=(torch.float32,), shape=tuple(token_topk_to_pos.shape), contiguous=True)
    _check_routing(pos_to_token_topk, weight, None, rows, name_w="weight")
    clamp = _clamp_arg(swiglu_clamp_value)
    return TABLE.run("swiglu_backward_and_per_token_cast", q.device, q, sf, grad_out, weight, pos_to_token_topk,
                     token_topk_to_pos, num_per_channels, round_sf, clamp)


def _bwd_cast_ref(q, sf, grad_out, weight, pos_to_token_topk, token_topk_to_pos, num_per_channels, round_sf, clamp):
    out, x_grad, weight_grad = ref.swiglu_backward((q, sf), grad_out, weight, pos_to_token_topk, token_topk_to_pos,
                                                   num_per_channels, clamp)
    x_grad_q = ref_cast.cast(x_grad, "e4m3", (1, num_per_channels), round_sf=round_sf)
    return out.to(grad_out.dtype), x_grad_q, x_grad.to(grad_out.dtype), weight_grad


def _bwd_cast_host(q, sf, grad_out, weight, pos_to_token_topk, token_topk_to_pos, num_per_channels, round_sf, clamp):
    h2 = q.shape[-1]
    h = h2 // 2
    rows = q.numel() // h2 if h2 else 0
    out = empty(rows, h, dtype=grad_out.dtype)
    x_grad = empty(rows, h2, dtype=grad_out.dtype)
    xg_q = empty(rows, h2, dtype=torch.float8_e4m3fn)
    xg_sf = torch.empty((rows, h2 // num_per_channels), dtype=torch.float32, device=q.device)
    weight_grad = torch.zeros_like(weight)
    if rows:
        args = _args("SwigluBwdCastArgs", out=out, x_grad=x_grad, x_grad_q=xg_q, x_grad_sf=xg_sf,
                     weight_grad=weight_grad, q=q, sf=sf, grad_out=grad_out, weights=weight, p2tt=pos_to_token_topk,
                     P=rows, H=h, npc=num_per_channels, has_clamp=int(clamp is not None), clamp=clamp or 0.0,
                     round_sf=int(round_sf))
        host_kernel("tk_swiglu_bwd_cast", "swiglu_bwd_cast.cpp")(descriptors.address(args), threads())
    return out, (xg_q, xg_sf), x_grad, weight_grad


TABLE.register("swiglu_backward_and_per_token_cast", reference=_bwd_cast_ref,
               host=Impl(_bwd_cast_host, "a BF16 grad_out", lambda q, sf, grad_out, *_: grad_out.dtype == torch.bfloat16),
               ascend=Impl(ascend_swiglu_bwd.swiglu_backward_and_per_token_cast,
                           "one kernel: the SwiGLU backward with the E4M3 cast fused"))


def swiglu_forward_and_per_channel_cast_and_transpose(x: torch.Tensor, fmt: str, num_per_tokens: int,
                                                      round_sf: bool = False, without_transpose: bool = False,
                                                      swiglu_clamp_value: float | None = None):
    """SwiGLU rounded to BF16, then the per-channel ``(num_per_tokens, 1)`` E4M3 cast; data (H, T)
    (or (T, H) with ``without_transpose``), sf (T/num_per_tokens, H)."""
    C.choice("fmt", fmt, ("e4m3",))
    C.tensor("x", x, dtypes=(torch.bfloat16,), ndim=2, contiguous=True)
    C.choice("num_per_tokens", num_per_tokens, (32, 128))
    rows, h2 = x.shape
    if rows % 128 or h2 % 128:
        raise C.fail("x", "a shape (T, 2H) with T % 128 == 0 and 2H % 128 == 0", tuple(x.shape))
    clamp = _clamp_arg(swiglu_clamp_value)
    return TABLE.run("swiglu_forward_and_per_channel_cast_and_transpose", x.device, x, num_per_tokens, round_sf,
                     without_transpose, clamp)


def _swiglu_ref(x, clamp):
    return ref.swiglu_forward(x, swiglu_clamp_value=clamp).bfloat16()


def _swiglu_host(x, clamp):
    rows, h = x.shape[0], x.shape[1] // 2
    y = empty(rows, h, dtype=torch.bfloat16)
    if rows:
        args = _args("SwigluFwdCastArgs", q=None, sf=None, y_out=y, x=x, dt=1, P=rows, H=h, npc=h, p2tt=None,
                     weights=None, p2e=None, has_clamp=clamp is not None, clamp=clamp or 0.0, counts=None,
                     round_sf=False, clamp_min=1e-4, packed=False, sm=0, sk=0)
        host_kernel("tk_swiglu_fwd_cast", "swiglu_fwd_cast.cpp")(descriptors.address(args), threads())
    return y


def _fwd_channel_cast_ref(x, num_per_tokens, round_sf, without_transpose, clamp):
    q, sf = ref_cast.cast(_swiglu_ref(x, clamp), "e4m3", (num_per_tokens, 1), round_sf=round_sf)
    return (q, sf) if without_transpose else (transpose_ref(q), sf)


def _fwd_channel_cast_host(x, num_per_tokens, round_sf, without_transpose, clamp):
    q, sf = host_cast.cast("float", _swiglu_host(x, clamp), "e4m3", (num_per_tokens, 1), None, False, round_sf,
                           False, None, False, None)
    return (q, sf) if without_transpose else (transpose_host(q), sf)


def _fwd_channel_cast_ascend(x, num_per_tokens, round_sf, without_transpose, clamp):
    return ascend_channel_cast.cast(x, num_per_tokens, round_sf, not without_transpose, swiglu=True, clamp=clamp)


TABLE.register("swiglu_forward_and_per_channel_cast_and_transpose", reference=_fwd_channel_cast_ref,
               host=Impl(_fwd_channel_cast_host, "the host SwiGLU, per-channel cast and transpose in turn"),
               ascend=Impl(_fwd_channel_cast_ascend, "one kernel: SwiGLU (rounded to BF16), the per-channel E4M3 "
                                                     "cast and the transpose (or none with without_transpose)"))
