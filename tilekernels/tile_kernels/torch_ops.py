"""Ops as ``torch.ops.tile_kernels.*`` (``torch.library``), so ``torch.compile`` traces a model calling them:
Meta implementations give the shapes, and an op writing into a caller's tensor declares it mutated
(``Tensor(a!)``). Imported by ``tile_kernels`` (explicit schemas: under a millisecond)."""
from __future__ import annotations

import torch

from .modeling.mhc.ops import mhc_pre_big_fuse
from .moe import inplace_unique_group_indices, normalize_weight
from .transpose import batched_transpose, transpose

LIB = torch.library.Library("tile_kernels", "FRAGMENT")


def _op(schema: str, impl, meta) -> None:
    name = schema.split("(", 1)[0]
    LIB.define(schema)
    LIB.impl(name, impl, "CompositeExplicitAutograd")
    LIB.impl(name, meta, "Meta")


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
