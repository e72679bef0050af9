"""The kernels as ``torch.ops.flash_mla.*`` under the names of upstream's extension (``flash_mla.cuda``,
registered in the ``flash_mla`` torch library namespace on its CUDA and Ascend builds), so ``torch.compile``
traces a model calling them: Meta implementations give the shapes, and ops writing into a caller's tensors
declare them mutated (``Tensor(a!)``). Imported by ``flash_mla`` (explicit schemas: under a millisecond).
The decode ops take and return upstream's split-KV scheduling tensors: this device runs each request in
one piece, so the incoming ones are ignored and the returned ones say so (``num_splits = [0, 1, ..., b]``,
no per-SM work ranges: an empty ``[0, 8]`` int32 ``tile_scheduler_metadata``); ``get_mla_decoding_metadata``
(the older extension's metadata op) returns that pair for a batch."""
from __future__ import annotations

import torch

from deepjit.torch_library import OpLibrary, returns_nothing

from .interface import (
    _flash_attn_varlen_backward,
    _flash_attn_varlen_forward,
    flash_mla_sparse_fwd,
    flash_mla_with_kvcache,
)
from .metadata import FlashMLASchedMeta

OPS = OpLibrary("flash_mla")
_op = OPS.op



def _sparse_prefill_fwd(q, kv, indices, sm_scale, d_v, attn_sink=None, topk_length=None):
    out, max_logits, lse = flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v, attn_sink, topk_length)
    return out, max_logits.contiguous(), lse.contiguous()


def _sparse_prefill_fwd_meta(q, kv, indices, sm_scale, d_v, attn_sink=None, topk_length=None):
    s_q, h_q = q.shape[:2]
    return (q.new_empty((s_q, h_q, d_v)), q.new_empty((s_q, h_q), dtype=torch.float32),
            q.new_empty((s_q, h_q), dtype=torch.float32))


def _schedule(batch: int, device):
    """(tile_scheduler_metadata, num_splits) of the one-split-per-request schedule."""
    return (torch.empty((0, 8), dtype=torch.int32, device=device),
            torch.arange(batch + 1, dtype=torch.int32, device=device))


def _schedule_meta(batch: int, like: torch.Tensor):
    return like.new_empty((0, 8), dtype=torch.int32), like.new_empty((batch + 1,), dtype=torch.int32)


def _decode_meta(q, d_v):
    b, s_q, h_q = q.shape[:3]
    return (q.new_empty((b, s_q, h_q, d_v)), q.new_empty((b, h_q, s_q), dtype=torch.float32), *_schedule_meta(b, q))


def _sparse_decode_fwd(q, kv, indices, topk_length, attn_sink, tile_scheduler_metadata, num_splits, extra_kv,
                       extra_indices, extra_topk_length, d_v, sm_scale):
    out, lse = flash_mla_with_kvcache(q, kv, None, None, d_v, FlashMLASchedMeta(), softmax_scale=sm_scale,
                                      is_fp8_kvcache=True, indices=indices, attn_sink=attn_sink, extra_k_cache=extra_kv,
                                      extra_indices_in_kvcache=extra_indices, topk_length=topk_length,
                                      extra_topk_length=extra_topk_length)
    return (out.contiguous(), lse.contiguous(), *_schedule(q.shape[0], q.device))


def _sparse_decode_fwd_meta(q, kv, indices, topk_length, attn_sink, tile_scheduler_metadata, num_splits, extra_kv,
                            extra_indices, extra_topk_length, d_v, sm_scale):
    return _decode_meta(q, d_v)


def _dense_decode_fwd(q, kcache, head_size_v, seqlens_k, block_table, softmax_scale, is_causal,
                      tile_scheduler_metadata=None, num_splits=None):
    # as upstream's kernel, the cache's dtype says whether it is quantised
    out, lse = flash_mla_with_kvcache(q, kcache, block_table, seqlens_k, head_size_v, FlashMLASchedMeta(),
                                      softmax_scale=softmax_scale, causal=is_causal,
                                      is_fp8_kvcache=kcache.dtype not in (torch.bfloat16, torch.float16))
    return (out.contiguous(), lse.contiguous(), *_schedule(q.shape[0], q.device))


def _dense_decode_fwd_meta(q, kcache, head_size_v, seqlens_k, block_table, softmax_scale, is_causal,
                           tile_scheduler_metadata=None, num_splits=None):
    return _decode_meta(q, head_size_v)


def _decoding_metadata(seqlens_k, num_q_tokens_per_head_k, h_k, h_q=None, is_fp8_kvcache=False, topk=None):
    return _schedule(seqlens_k.shape[0], seqlens_k.device)


def _decoding_metadata_meta(seqlens_k, num_q_tokens_per_head_k, h_k, h_q=None, is_fp8_kvcache=False, topk=None):
    return _schedule_meta(seqlens_k.shape[0], seqlens_k)


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
_op("sparse_decode_fwd(Tensor q, Tensor kv, Tensor indices, Tensor? topk_length, Tensor? attn_sink, "
    "Tensor? tile_scheduler_metadata, Tensor? num_splits, Tensor? extra_kv, Tensor? extra_indices, "
    "Tensor? extra_topk_length, int d_v, float sm_scale) -> (Tensor, Tensor, Tensor, Tensor)",
    _sparse_decode_fwd, _sparse_decode_fwd_meta)
_op("dense_decode_fwd(Tensor q, Tensor kcache, int head_size_v, Tensor seqlens_k, Tensor block_table, "
    "float softmax_scale, bool is_causal, Tensor? tile_scheduler_metadata=None, Tensor? num_splits=None) "
    "-> (Tensor, Tensor, Tensor, Tensor)", _dense_decode_fwd, _dense_decode_fwd_meta)
_op("get_mla_decoding_metadata(Tensor seqlens_k, int num_q_tokens_per_head_k, int h_k, int? h_q=None, "
    "bool is_fp8_kvcache=False, int? topk=None) -> (Tensor, Tensor)", _decoding_metadata, _decoding_metadata_meta)
_op("dense_prefill_fwd(Tensor workspace, Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_qo, Tensor cu_seqlens_kv, "
    "Tensor(a!) out, Tensor(b!) lse, int mask_mode_code, float softmax_scale, int max_seqlen_qo, int max_seqlen_kv, "
    "bool is_varlen) -> ()", _dense_prefill_fwd, returns_nothing)
_op("dense_prefill_bwd(Tensor workspace, Tensor do, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
    "Tensor cu_seqlens_qo, Tensor cu_seqlens_kv, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, int mask_mode_code, "
    "float softmax_scale, int max_seqlen_qo, int max_seqlen_kv, bool is_varlen) -> ()",
    _dense_prefill_bwd, returns_nothing)
