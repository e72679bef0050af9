"""The kernels as ``torch.ops.flash_mla.*`` under the names of upstream's extension (``flash_mla.cuda``,
registered in the ``flash_mla`` torch library namespace on its CUDA and Ascend builds), so ``torch.compile``
traces a model calling them: Meta implementations give the shapes, and ops writing into a caller's tensors
declare them mutated (``Tensor(a!)``). Imported by ``flash_mla`` (explicit schemas: under a millisecond).
The decode ops, which carry upstream's split-KV scheduling tensors, are not registered."""
from __future__ import annotations

import torch

from .interface import _flash_attn_varlen_backward, _flash_attn_varlen_forward, flash_mla_sparse_fwd

LIB = torch.library.Library("flash_mla", "FRAGMENT")


def _op(schema: str, impl, meta) -> None:
    name = schema.split("(", 1)[0]
    LIB.define(schema)
    LIB.impl(name, impl, "CompositeExplicitAutograd")
    LIB.impl(name, meta, "Meta")


def _returns_nothing(*args, **kwargs) -> None:
    return None


def _sparse_prefill_fwd(q, kv, indices, sm_scale, d_v, attn_sink=None, topk_length=None):
    out, max_logits, lse = flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v, attn_sink, topk_length)
    return out, max_logits.contiguous(), lse.contiguous()


def _sparse_prefill_fwd_meta(q, kv, indices, sm_scale, d_v, attn_sink=None, topk_length=None):
    s_q, h_q = q.shape[:2]
    return (q.new_empty((s_q, h_q, d_v)), q.new_empty((s_q, h_q), dtype=torch.float32),
            q.new_empty((s_q, h_q), dtype=torch.float32))


def _dense_prefill_fwd(workspace, q, k, v, cu_seqlens_qo, cu_seqlens_kv, out, lse, mask_mode_code, softmax_scale,
                       max_seqlen_qo, max_seqlen_kv, is_varlen):
    _flash_attn_varlen_forward(q, k, v, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo, max_seqlen_kv, out=out, lse=lse,
                               causal=mask_mode_code == 1, softmax_scale=softmax_scale, is_varlen=is_varlen)


def _dense_prefill_bwd(workspace, do, q, k, v, out, lse, cu_seqlens_qo, cu_seqlens_kv, dq, dk, dv, mask_mode_code,
                       softmax_scale, max_seqlen_qo, max_seqlen_kv, is_varlen):
    _flash_attn_varlen_backward(do, q, k, v, out, lse, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo, max_seqlen_kv,
                                dq=dq, dk=dk, dv=dv, causal=mask_mode_code == 1, softmax_scale=softmax_scale,
                                is_varlen=is_varlen)


_op("sparse_prefill_fwd(Tensor q, Tensor kv, Tensor indices, float sm_scale, int d_v, Tensor? attn_sink=None, "
    "Tensor? topk_length=None) -> (Tensor, Tensor, Tensor)", _sparse_prefill_fwd, _sparse_prefill_fwd_meta)
_op("dense_prefill_fwd(Tensor workspace, Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_qo, Tensor cu_seqlens_kv, "
    "Tensor(a!) out, Tensor(b!) lse, int mask_mode_code, float softmax_scale, int max_seqlen_qo, int max_seqlen_kv, "
    "bool is_varlen) -> ()", _dense_prefill_fwd, _returns_nothing)
_op("dense_prefill_bwd(Tensor workspace, Tensor do, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
    "Tensor cu_seqlens_qo, Tensor cu_seqlens_kv, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, int mask_mode_code, "
    "float softmax_scale, int max_seqlen_qo, int max_seqlen_kv, bool is_varlen) -> ()",
    _dense_prefill_bwd, _returns_nothing)
