"""``torch.ops.tile_kernels.*`` forms of the routing helpers, the block / fused / SwiGLU casts and Engram, routed
under every public name while Dynamo traces (``deepjit.torch_library.route_everywhere``), as in ``torch_ops``.

Schemas take a ``(data, sf)`` input as two tensors and return flat tensors (the public function's nesting is
rebuilt around the op; an output that may be None comes back as an empty tensor and is mapped back). Tensors the
functions write (``unmapped_topk_idx``, ``scores``, ``clamped_count``, the Engram gradients) are ``Tensor(a!)``.
The routing ops have shape-only Meta kernels; the casts and Engram read shapes off a run on ones-valued CPU
stand-ins (``deepjit.torch_library.meta_from_stand_ins``: static shapes). A call form an op does not cover (``out=`` buffers) runs
the function itself: eager, or a graph break under torch.compile."""
from __future__ import annotations

import torch

from deepjit.torch_library import OpLibrary, meta_from_stand_ins, route_everywhere

from .engram import engram_gate_bwd, engram_gate_fwd, engram_hash, fused_weight, grad_w_reduce
from .moe import (
    aux_fi,
    expand_to_fused_with_sf,
    group_count,
    mask_indices_by_tp,
    moe_topk_gate_forward,
    top2_sum_gate,
    topk_sum_and_topk_group_idx,
)
from .quant import (
    cast_back,
    per_block_cast,
    per_block_cast_lossless,
    per_block_cast_with_precomputed_sf,
    per_block_cast_with_sf_only,
    per_channel_cast_and_transpose,
    per_channel_cast_fused,
    per_token_cast_with_precomputed_sf,
    per_token_cast_with_sf_only,
    swiglu_backward_and_per_token_cast,
    swiglu_forward_and_per_channel_cast_and_transpose,
    swiglu_forward_and_per_token_cast,
)

OPS = OpLibrary("tile_kernels")


def _op(schema: str, impl, meta=None) -> None:
    """Defines an op; without ``meta`` its Meta kernel runs ``impl`` on stand-ins."""
    OPS.op(schema, impl, meta if meta is not None else (lambda *args: meta_from_stand_ins(impl, *args)))


def _pair(x, sf):
    return x if sf is None else (x, sf)


def _split(x):
    """A public ``x`` (a tensor or a (data, sf) pair) as the op's ``(x, x_sf)``."""
    return (x[0], x[1]) if isinstance(x, (tuple, list)) else (x, None)


def _none_as_empty(outs, like):
    return tuple(like.new_empty(0) if o is None else o for o in outs)


def _gate_shape(logits, num_topk, use_shared, num_shared):
    width = num_topk + (num_shared if use_shared else 0)
    return (logits.new_empty((logits.shape[0], width), dtype=torch.int64),
            logits.new_empty((logits.shape[0], width), dtype=torch.float32))


def _expand_with_sf_meta(x, x_sf, num_per_channels, token_topk_to_pos, pos_to_expert,
                         use_tma_aligned_col_major_sf=False):
    """Rows per position; the sf row-major, or a column-major view of (hidden_sf, align(P, 4)) storage."""
    rows, hidden_sf = pos_to_expert.shape[0], x_sf.shape[1]
    data = x.new_empty((rows, x.shape[1]))
    if not use_tma_aligned_col_major_sf:
        return data, x_sf.new_empty((rows, hidden_sf))
    return data, x_sf.new_empty((hidden_sf, (rows + 3) // 4 * 4)).t()[:rows]


# ---- routing -------------------------------------------------------------------------------------------
_op("top2_sum_gate(Tensor logits, Tensor bias, int num_topk, int num_topk_groups, int num_groups, "
    "bool use_shared_as_routed, int num_shared_experts, float routed_scaling_factor, int ep_rank, int num_ep_ranks, "
    "int tp_rank, int num_tp_ranks, str scoring_func, Tensor? mask=None, Tensor? fix_routing_mask=None, "
    "Tensor? to_physical_map=None, Tensor? logical_count=None, Tensor(a!)? unmapped_topk_idx=None) -> (Tensor, Tensor)",
    lambda *args: tuple(top2_sum_gate(*args)),
    lambda logits, bias, num_topk, g1, g2, use_shared, num_shared, *rest: _gate_shape(logits, num_topk, use_shared,
                                                                                      num_shared))
_op("topk_sum_and_topk_group_idx(Tensor scores, int num_topk_sum, int num_topk_groups) -> Tensor",
    topk_sum_and_topk_group_idx,
    lambda scores, num_topk_sum, num_topk_groups: scores.new_empty((scores.shape[0], num_topk_groups),
                                                                   dtype=torch.int64))
_op("moe_topk_gate_forward(Tensor logits, int num_topk, bool use_shared_as_routed, int num_shared_experts, "
    "float routed_scaling_factor, int ep_rank, str scoring_func, Tensor? mask, Tensor? bias, Tensor? image_bias, "
    "Tensor? image_token_mask, Tensor? fix_routing_mask, Tensor? to_physical_map, Tensor? logical_count, "
    "Tensor(a!)? unmapped_topk_idx, Tensor? force_random, Tensor(b!)? scores) -> (Tensor, Tensor)",
    lambda *args: tuple(moe_topk_gate_forward(*args[:16], None, args[16])),
    lambda logits, num_topk, use_shared, num_shared, *rest: _gate_shape(logits, num_topk, use_shared, num_shared))
_op("aux_fi(Tensor topk_idx, int num_experts, int num_aux_topk) -> Tensor", aux_fi,
    lambda topk_idx, num_experts, num_aux_topk: topk_idx.new_empty((num_experts,), dtype=torch.float32))
_op("group_count(Tensor group_idx, int num_groups) -> Tensor", group_count)
_op("mask_indices_by_tp(Tensor indices, int n, int num_ep_ranks, int tp_rank, int num_tp_ranks) -> Tensor",
    mask_indices_by_tp)
_op("expand_to_fused_with_sf(Tensor x, Tensor x_sf, int num_per_channels, Tensor token_topk_to_pos, "
    "Tensor pos_to_expert, bool use_tma_aligned_col_major_sf=False) -> (Tensor, Tensor)",
    lambda x, x_sf, *rest: tuple(expand_to_fused_with_sf((x, x_sf), *rest)), _expand_with_sf_meta)

# ---- casts ---------------------------------------------------------------------------------------------
_BLOCK_FLAGS = "bool use_tma_aligned_col_major_sf=False, bool round_sf=False, bool use_packed_ue8m0=False"
_op(f"per_block_cast(Tensor x, str fmt, int[] block_size, {_BLOCK_FLAGS}) -> (Tensor, Tensor)",
    lambda x, fmt, block_size, *flags: tuple(per_block_cast(x, fmt, tuple(block_size), *flags)))
_op(f"per_block_cast_with_precomputed_sf(Tensor x, str fmt, int[] block_size, Tensor sf, {_BLOCK_FLAGS}) -> Tensor",
    lambda x, fmt, block_size, sf, *flags: per_block_cast_with_precomputed_sf(x, fmt, tuple(block_size), sf, *flags))
_op(f"per_block_cast_with_sf_only(Tensor x, str fmt, int[] block_size, {_BLOCK_FLAGS}) -> Tensor",
    lambda x, fmt, block_size, *flags: per_block_cast_with_sf_only(x, fmt, tuple(block_size), *flags))
_op(f"per_block_cast_lossless(Tensor x, Tensor? x_sf, str fmt, int[] x_block_size, int[] out_block_size, "
    f"{_BLOCK_FLAGS}) -> (Tensor, Tensor)",
    lambda x, x_sf, fmt, xb, ob, *flags: tuple(per_block_cast_lossless(_pair(x, x_sf), fmt, tuple(xb), tuple(ob),
                                                                       *flags)))
_op("cast_back(Tensor x, Tensor x_sf, str fmt, int[] x_block_size, str? x_special_fmt=None) -> Tensor",
    lambda x, x_sf, fmt, xb, special=None: cast_back((x, x_sf), fmt, tuple(xb), special))
_op(f"per_token_cast_with_precomputed_sf(Tensor x, Tensor? x_sf, str fmt, int num_per_channels, Tensor sf, "
    f"int[]? x_block_size=None, {_BLOCK_FLAGS}) -> Tensor",
    lambda x, x_sf, fmt, n, sf, xb=None, *flags: per_token_cast_with_precomputed_sf(
        _pair(x, x_sf), fmt, n, sf, None if xb is None else tuple(xb), *flags))
_op(f"per_token_cast_with_sf_only(Tensor x, Tensor? x_sf, str fmt, int num_per_channels, int[]? x_block_size=None, "
    f"{_BLOCK_FLAGS}) -> Tensor",
    lambda x, x_sf, fmt, n, xb=None, *flags: per_token_cast_with_sf_only(
        _pair(x, x_sf), fmt, n, None if xb is None else tuple(xb), *flags))
_op("per_channel_cast_fused(Tensor x, Tensor? x_sf, str fmt, int num_per_tokens, bool round_sf=False, "
    "int? num_per_channels=None, Tensor? pos_to_token=None) -> (Tensor, Tensor)",
    lambda x, x_sf, *rest: tuple(per_channel_cast_fused(_pair(x, x_sf), *rest)))
_op("per_channel_cast_and_transpose(Tensor x, str fmt, int num_per_tokens, bool round_sf=False) -> (Tensor, Tensor)",
    lambda *args: tuple(per_channel_cast_and_transpose(*args)))
_op("swiglu_forward_and_per_token_cast(Tensor x, str fmt, int num_per_channels, Tensor? pos_to_token_topk=None, "
    f"Tensor? topk_weights=None, Tensor? pos_to_expert=None, {_BLOCK_FLAGS}, float? swiglu_clamp_value=None, "
    "Tensor(a!)? clamped_count=None, float? sf_clamp_min=None) -> (Tensor, Tensor)",
    lambda *args: tuple(swiglu_forward_and_per_token_cast(*args)))
_op("swiglu_backward_and_per_token_cast(Tensor x, Tensor x_sf, Tensor grad_out, Tensor weight, "
    "Tensor pos_to_token_topk, Tensor token_topk_to_pos, int num_per_channels, bool round_sf=False, "
    "float? swiglu_clamp_value=None) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    lambda x, x_sf, *rest: _flat_swiglu_backward(swiglu_backward_and_per_token_cast((x, x_sf), *rest)))
_op("swiglu_forward_and_per_channel_cast_and_transpose(Tensor x, str fmt, int num_per_tokens, bool round_sf=False, "
    "bool without_transpose=False, float? swiglu_clamp_value=None) -> (Tensor, Tensor)",
    lambda *args: tuple(swiglu_forward_and_per_channel_cast_and_transpose(*args)))


def _flat_swiglu_backward(outs):
    out, (q, sf), x_grad, weight_grad = outs
    return out, q, sf, x_grad, weight_grad


# ---- Engram --------------------------------------------------------------------------------------------
_op("engram_hash(Tensor ngram_token_ids, Tensor multipliers, Tensor vocab_sizes, Tensor offsets) -> Tensor",
    engram_hash)
_op("fused_weight(Tensor weight_hidden, Tensor weight_embed) -> Tensor", fused_weight,
    lambda weight_hidden, weight_embed: weight_hidden.new_empty(weight_hidden.shape, dtype=torch.float32))
_op("engram_gate_fwd(Tensor hidden_states, Tensor k, Tensor v, Tensor weight_fused, float eps, float clamp_value, "
    "bool save_for_backward=True) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    lambda hidden_states, *rest: _none_as_empty(engram_gate_fwd(hidden_states, *rest), hidden_states))
_op("engram_gate_bwd(Tensor grad_out, Tensor hidden_states, Tensor k, Tensor v, Tensor weight_fused, Tensor dot, "
    "Tensor gate_score, Tensor rstd_x, Tensor rstd_k, float clamp_value) -> (Tensor, Tensor, Tensor, Tensor)",
    lambda *args: tuple(engram_gate_bwd(*args)))
_op("grad_w_reduce(Tensor grad_w_partial, Tensor weight_hidden, Tensor weight_embed, Tensor(a!) grad_weight_hidden, "
    "Tensor(b!) grad_weight_embed) -> ()", grad_w_reduce, lambda *args: None)


def _route() -> None:
    ops = torch.ops.tile_kernels

    def gate(logits, num_topk, use_shared_as_routed, num_shared_experts, routed_scaling_factor, ep_rank,
             scoring_func="sqrtsoftplus", mask=None, bias=None, image_bias=None, image_token_mask=None,
             fix_routing_mask=None, to_physical_map=None, logical_count=None, unmapped_topk_idx=None,
             force_random=None, out=None, scores=None):
        args = (logits, num_topk, use_shared_as_routed, num_shared_experts, routed_scaling_factor, ep_rank,
                scoring_func, mask, bias, image_bias, image_token_mask, fix_routing_mask, to_physical_map,
                logical_count, unmapped_topk_idx, force_random)
        if out is not None:
            return moe_topk_gate_forward(*args, out, scores)
        return ops.moe_topk_gate_forward(*args, scores)

    def expand_with_sf(x, num_per_channels, token_topk_to_pos, pos_to_expert, use_tma_aligned_col_major_sf=False):
        return ops.expand_to_fused_with_sf(x[0], x[1], num_per_channels, token_topk_to_pos, pos_to_expert,
                                           use_tma_aligned_col_major_sf)

    def block_cast(x, fmt, block_size, *flags, **kw):
        return ops.per_block_cast(x, fmt, list(block_size), *flags, **kw)

    def block_cast_precomputed(x, fmt, block_size, sf, *flags, **kw):
        return ops.per_block_cast_with_precomputed_sf(x, fmt, list(block_size), sf, *flags, **kw)

    def block_cast_sf_only(x, fmt, block_size, *flags, **kw):
        return ops.per_block_cast_with_sf_only(x, fmt, list(block_size), *flags, **kw)

    def lossless(x, fmt, x_block_size, out_block_size, *flags, **kw):
        return ops.per_block_cast_lossless(*_split(x), fmt, list(x_block_size), list(out_block_size), *flags, **kw)

    def back(x, fmt, x_block_size, x_special_fmt=None):
        return ops.cast_back(x[0], x[1], fmt, list(x_block_size), x_special_fmt)

    def token_precomputed(x, fmt, num_per_channels, sf, x_block_size=None, *flags, **kw):
        return ops.per_token_cast_with_precomputed_sf(*_split(x), fmt, num_per_channels, sf,
                                                      None if x_block_size is None else list(x_block_size), *flags,
                                                      **kw)

    def token_sf_only(x, fmt, num_per_channels, x_block_size=None, *flags, **kw):
        return ops.per_token_cast_with_sf_only(*_split(x), fmt, num_per_channels,
                                               None if x_block_size is None else list(x_block_size), *flags, **kw)

    def channel_fused(x, fmt, num_per_tokens, round_sf=False, num_per_channels=None, pos_to_token=None):
        return ops.per_channel_cast_fused(*_split(x), fmt, num_per_tokens, round_sf, num_per_channels, pos_to_token)

    def swiglu_backward(x, grad_out, weight, pos_to_token_topk, token_topk_to_pos, num_per_channels, round_sf=False,
                        swiglu_clamp_value=None):
        out, q, sf, x_grad, weight_grad = ops.swiglu_backward_and_per_token_cast(
            x[0], x[1], grad_out, weight, pos_to_token_topk, token_topk_to_pos, num_per_channels, round_sf,
            swiglu_clamp_value)
        return out, (q, sf), x_grad, weight_grad

    def gate_fwd(hidden_states, k, v, weight_fused, eps, clamp_value, save_for_backward=True):
        outs = ops.engram_gate_fwd(hidden_states, k, v, weight_fused, eps, clamp_value, save_for_backward)
        return outs if save_for_backward else (outs[0], None, None, None, None)

    routes = {top2_sum_gate: ops.top2_sum_gate, topk_sum_and_topk_group_idx: ops.topk_sum_and_topk_group_idx,
              moe_topk_gate_forward: gate, aux_fi: ops.aux_fi, group_count: ops.group_count,
              mask_indices_by_tp: ops.mask_indices_by_tp, expand_to_fused_with_sf: expand_with_sf,
              per_block_cast: block_cast, per_block_cast_with_precomputed_sf: block_cast_precomputed,
              per_block_cast_with_sf_only: block_cast_sf_only, per_block_cast_lossless: lossless, cast_back: back,
              per_token_cast_with_precomputed_sf: token_precomputed, per_token_cast_with_sf_only: token_sf_only,
              per_channel_cast_fused: channel_fused, per_channel_cast_and_transpose: ops.per_channel_cast_and_transpose,
              swiglu_forward_and_per_token_cast: ops.swiglu_forward_and_per_token_cast,
              swiglu_backward_and_per_token_cast: swiglu_backward,
              swiglu_forward_and_per_channel_cast_and_transpose: ops.swiglu_forward_and_per_channel_cast_and_transpose,
              engram_hash: ops.engram_hash, fused_weight: ops.fused_weight, engram_gate_fwd: gate_fwd,
              engram_gate_bwd: ops.engram_gate_bwd, grad_w_reduce: ops.grad_w_reduce}
    for fn, call_op in routes.items():
        route_everywhere("tile_kernels", fn, call_op, keep=__name__)


_route()
