"""Ops as ``torch.ops.tile_kernels.*`` (``torch.library``), so ``torch.compile`` traces a model calling them:
Meta implementations give the shapes, and an op writing into a caller's tensor declares it mutated
(``Tensor(a!)``). Imported by ``tile_kernels`` (explicit schemas: under a millisecond). The casts return
``(data, scales)`` as two tensors; their Meta kernels read shapes and strides off a run on ones-valued CPU
stand-ins (the layouts vary with the flags), so they need static shapes. ``get_fused_mapping`` returns its
seven tensors (not the host list of aligned counts). The mHC ops are forward-only here: no autograd
formula is registered for the op form (the modules' functions keep theirs)."""
from __future__ import annotations

import torch

from deepjit.torch_library import OpLibrary, meta_from_stand_ins

from .modeling.mhc.ops import (
    expand_to_mhc,
    mhc_post,
    mhc_pre_apply_mix,
    mhc_pre_big_fuse,
    mhc_pre_split_mixes,
    sinkhorn_normalize,
)
from .moe import (
    expand_to_fused,
    get_fused_mapping,
    inplace_unique_group_indices,
    normalize_weight,
    reduce_fused,
    topk_gate,
)
from .quant import per_channel_cast, per_token_cast, per_token_cast_back
from .transpose import batched_transpose, transpose

OPS = OpLibrary("tile_kernels")
_op = OPS.op


def _per_token_cast(x, fmt, num_per_channels, x_block_size=None, use_tma_aligned_col_major_sf=False, round_sf=False,
                    use_packed_ue8m0=False):
    return tuple(per_token_cast(x, fmt, num_per_channels, None if x_block_size is None else tuple(x_block_size),
                                use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0))


def _per_channel_cast(x, fmt, num_per_tokens, round_sf=False):
    return tuple(per_channel_cast(x, fmt, num_per_tokens, round_sf))


def _per_token_cast_back(x, sf, fmt, num_per_channels, x_special_fmt=None):
    return per_token_cast_back((x, sf), fmt, num_per_channels, x_special_fmt)


def _fused_mapping(topk_idx, num_experts, num_expanded_tokens, alignment):
    return tuple(get_fused_mapping(topk_idx, num_experts, num_expanded_tokens, alignment)[:7])


def _fused_mapping_meta(topk_idx, num_experts, num_expanded_tokens, alignment):
    per_pos = [topk_idx.new_empty((num_expanded_tokens,), dtype=torch.int32) for _ in range(3)]
    per_expert = [topk_idx.new_empty((num_experts,), dtype=torch.int32) for _ in range(3)]
    return (*per_pos, topk_idx.new_empty(topk_idx.shape, dtype=torch.int32), *per_expert)


def _split_mixes_meta(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps):
    outer = input_mixes.shape[:-1]
    return (input_mixes.new_empty((*outer, mhc_mult, 1)), input_mixes.new_empty((*outer, mhc_mult, 1)),
            input_mixes.new_empty((*outer, mhc_mult, mhc_mult)))


def _normalize_weight_meta(topk_weights):
    return topk_weights.new_empty(topk_weights.shape[:1]), topk_weights.new_empty(topk_weights.shape)


def _pre_big_fuse_meta(residual, fn, mhc_scale, mhc_base, rms_eps, mhc_pre_eps, mhc_sinkhorn_eps,
                       mhc_post_mult_value, sinkhorn_repeat, n_splits=16):
    *outer, m, h = residual.shape
    return (residual.new_empty((*outer, m, 1), dtype=torch.float32),
            residual.new_empty((*outer, m, m), dtype=torch.float32), residual.new_empty((*outer, h)))


_op("transpose(Tensor x) -> Tensor", lambda x: transpose(x).clone(), lambda x: x.new_empty(x.shape[::-1]))
_op("batched_transpose(Tensor x) -> Tensor", lambda x: batched_transpose(x).clone(),
    lambda x: x.new_empty((x.shape[0], x.shape[2], x.shape[1])))
_op("normalize_weight(Tensor topk_weights) -> (Tensor, Tensor)", normalize_weight, _normalize_weight_meta)
_op("inplace_unique_group_indices(Tensor(a!) group_indices, int num_groups) -> ()", inplace_unique_group_indices,
    lambda group_indices, num_groups: None)
_op("mhc_pre_big_fuse(Tensor residual, Tensor fn, Tensor mhc_scale, Tensor mhc_base, float rms_eps, "
    "float mhc_pre_eps, float mhc_sinkhorn_eps, float mhc_post_mult_value, int sinkhorn_repeat, int n_splits=16) "
    "-> (Tensor, Tensor, Tensor)", mhc_pre_big_fuse, _pre_big_fuse_meta)

_op("per_token_cast(Tensor x, str fmt, int num_per_channels, int[]? x_block_size=None, "
    "bool use_tma_aligned_col_major_sf=False, bool round_sf=False, bool use_packed_ue8m0=False) -> (Tensor, Tensor)",
    _per_token_cast, lambda *args: meta_from_stand_ins(_per_token_cast, *args))
_op("per_channel_cast(Tensor x, str fmt, int num_per_tokens, bool round_sf=False) -> (Tensor, Tensor)",
    _per_channel_cast, lambda *args: meta_from_stand_ins(_per_channel_cast, *args))
_op("per_token_cast_back(Tensor x, Tensor sf, str fmt, int num_per_channels, str? x_special_fmt=None) -> Tensor",
    _per_token_cast_back, lambda *args: meta_from_stand_ins(_per_token_cast_back, *args))
_op("topk_gate(Tensor scores, int num_topk) -> Tensor", topk_gate,
    lambda scores, num_topk: scores.new_empty((scores.shape[0], num_topk), dtype=torch.int64))
_op("get_fused_mapping(Tensor topk_idx, int num_experts, int num_expanded_tokens, int alignment) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)", _fused_mapping, _fused_mapping_meta)
_op("expand_to_fused(Tensor x, Tensor token_topk_to_pos, Tensor pos_to_expert) -> Tensor", expand_to_fused,
    lambda x, token_topk_to_pos, pos_to_expert: x.new_empty((pos_to_expert.shape[0], x.shape[1])))
_op("reduce_fused(Tensor x, Tensor? topk_weights, Tensor token_topk_to_pos) -> Tensor",
    lambda x, topk_weights, token_topk_to_pos: reduce_fused(x, topk_weights, token_topk_to_pos),
    lambda x, topk_weights, token_topk_to_pos: x.new_empty((token_topk_to_pos.shape[0], x.shape[1])))
_op("expand_to_mhc(Tensor hidden, int mhc_mult) -> Tensor", lambda hidden, mhc_mult: expand_to_mhc(hidden, mhc_mult),
    lambda hidden, mhc_mult: hidden.new_empty((*hidden.shape[:-1], mhc_mult, hidden.shape[-1])))
_op("mhc_pre_apply_mix(Tensor x, Tensor mix) -> Tensor", lambda x, mix: mhc_pre_apply_mix(x, mix),
    lambda x, mix: x.new_empty((*x.shape[:-2], x.shape[-1])))
_op("mhc_post(Tensor x, Tensor residual, Tensor post_layer_mix, Tensor comb_res_mix) -> Tensor",
    lambda x, residual, post_layer_mix, comb_res_mix: mhc_post(x, residual, post_layer_mix, comb_res_mix),
    lambda x, residual, post_layer_mix, comb_res_mix: residual.new_empty(residual.shape))
_op("sinkhorn_normalize(Tensor x, int repeat=10, float eps=1e-06) -> Tensor", sinkhorn_normalize,
    lambda x, repeat=10, eps=1e-6: x.new_empty(x.shape))
_op("mhc_pre_split_mixes(Tensor input_mixes, Tensor mhc_scale, Tensor mhc_base, int mhc_mult, "
    "float mhc_post_mult_value, float mhc_pre_eps) -> (Tensor, Tensor, Tensor)",
    lambda *args: tuple(mhc_pre_split_mixes(*args)), _split_mixes_meta)


# ---- the public functions under torch.compile -------------------------------------------------------
# While Dynamo traces, each public function below calls its op (deepjit.torch_library.traced_as): the checks,
# which read values (index ranges, routing counts), run inside the op at run time. A call form the op does not
# cover (an ``out=`` buffer, a (data, scales) input to a cast, a mapping sized by a host read, an mHC call that
# needs gradients) takes the function itself: eager, or a graph break under torch.compile.
def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _route_compiled() -> None:
    from deepjit.torch_library import route_everywhere
    ops = torch.ops.tile_kernels

    def fused_mapping(topk_idx, num_experts, num_expanded_tokens, alignment, force_no_sync=False):
        if num_expanded_tokens == 0:    # the maps are cut to the routed count, read back from the device
            return get_fused_mapping(topk_idx, num_experts, num_expanded_tokens, alignment, force_no_sync)
        return (*ops.get_fused_mapping(topk_idx, num_experts, num_expanded_tokens, alignment), [])

    def reduce(x, topk_weights, token_topk_to_pos, fp8_format="", sf=None, out=None):
        if not isinstance(x, torch.Tensor) or fp8_format or sf is not None or out is not None:
            return reduce_fused(x, topk_weights, token_topk_to_pos, fp8_format, sf, out)
        return ops.reduce_fused(x, topk_weights, token_topk_to_pos)

    def token_cast(x, fmt, num_per_channels, x_block_size=None, use_tma_aligned_col_major_sf=False, round_sf=False,
                   use_packed_ue8m0=False):
        if not isinstance(x, torch.Tensor):
            return per_token_cast(x, fmt, num_per_channels, x_block_size, use_tma_aligned_col_major_sf, round_sf,
                                  use_packed_ue8m0)
        return ops.per_token_cast(x, fmt, num_per_channels, None if x_block_size is None else list(x_block_size),
                                  use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)

    def token_cast_back(x, fmt, num_per_channels, x_special_fmt=None):
        return ops.per_token_cast_back(x[0], x[1], fmt, num_per_channels, x_special_fmt)

    def to_mhc(hidden, mhc_mult, out=None):
        if out is not None or _needs_grad(hidden):
            return expand_to_mhc(hidden, mhc_mult, out)
        return ops.expand_to_mhc(hidden, mhc_mult)

    def apply_mix(x, mix, out=None):
        if out is not None or _needs_grad(x, mix):
            return mhc_pre_apply_mix(x, mix, out)
        return ops.mhc_pre_apply_mix(x, mix)

    def post(x, residual, post_layer_mix, comb_res_mix):
        if _needs_grad(x, residual, post_layer_mix, comb_res_mix):
            return mhc_post(x, residual, post_layer_mix, comb_res_mix)
        return ops.mhc_post(x, residual, post_layer_mix, comb_res_mix)

    def sinkhorn(x, repeat=10, eps=1e-6):
        return sinkhorn_normalize(x, repeat, eps) if _needs_grad(x) else ops.sinkhorn_normalize(x, repeat, eps)

    def split_mixes(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps):
        if _needs_grad(input_mixes, mhc_scale, mhc_base):
            return mhc_pre_split_mixes(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps)
        return ops.mhc_pre_split_mixes(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps)

    def big_fuse(residual, fn, mhc_scale, mhc_base, rms_eps, mhc_pre_eps, mhc_sinkhorn_eps, mhc_post_mult_value,
                 sinkhorn_repeat, n_splits=16):
        args = (residual, fn, mhc_scale, mhc_base, rms_eps, mhc_pre_eps, mhc_sinkhorn_eps, mhc_post_mult_value,
                sinkhorn_repeat, n_splits)
        return mhc_pre_big_fuse(*args) if _needs_grad(residual, fn, mhc_scale, mhc_base) else ops.mhc_pre_big_fuse(*args)

    routes = {transpose: ops.transpose, batched_transpose: ops.batched_transpose, normalize_weight: ops.normalize_weight,
              inplace_unique_group_indices: ops.inplace_unique_group_indices, topk_gate: ops.topk_gate,
              expand_to_fused: ops.expand_to_fused, per_channel_cast: ops.per_channel_cast,
              get_fused_mapping: fused_mapping, reduce_fused: reduce, per_token_cast: token_cast,
              per_token_cast_back: token_cast_back, expand_to_mhc: to_mhc, mhc_pre_apply_mix: apply_mix,
              mhc_post: post, sinkhorn_normalize: sinkhorn, mhc_pre_split_mixes: split_mixes, mhc_pre_big_fuse: big_fuse}
    for fn, call_op in routes.items():
        route_everywhere("tile_kernels", fn, call_op, keep=__name__)


_route_compiled()
from . import _torch_ops_more  # noqa: E402,F401  (the remaining public functions' op forms)
