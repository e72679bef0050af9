"""flash_mla's backend table: each attention kernel's reference, host and Ascend implementations, all
taking the validated arguments ``interface`` passes to ``run``. The Ascend column (``ascend/``) serves
sparse decode over every cache format (V3.2, MODEL1, V4.1 FP8 / FP4 in either placement) and sparse
prefill, at d_qk 512 and 576, ``convert_kv_layout``, and the BF16 / FP16 dense decode and varlen attention
forward (``ascend/dense_attn``); FP32 dense inputs keep the reference on NPU tensors."""
from __future__ import annotations

import torch

from deepjit import BackendTable, Impl

from . import host, reference
from ._lib import LIB
from .ascend import dense_attn as ascend_dense
from .ascend import kv_relayout as ascend_relayout
from .ascend import sparse_attn as ascend_sparse


def host_shapes_ok(d_qk: int, d_v: int, heads_per_kv: int) -> bool:
    """The host engine's limits (dense ops; the sparse ones are always inside them)."""
    return d_qk % 2 == 0 and d_qk <= 576 and d_v % 32 == 0 and d_v <= d_qk and heads_per_kv <= 128


def _sparse_decode_ref(q, scopes, sm_scale, head_dim_v, attn_sink, enable_batch_invariant):
    return reference.sparse_decode(q, scopes, sm_scale, head_dim_v, attn_sink)  # one summation order: invariant


def _dense_accepts(q, k_cache, block_table, cache_seqlens, head_dim_v, sm_scale, causal):
    return q.dtype == torch.bfloat16 and host_shapes_ok(q.shape[-1], head_dim_v, q.shape[2] // k_cache.shape[2])


def _varlen_ref(q, k, v, cu_q, cu_k, scale, causal):
    with torch.no_grad():
        out, lse = reference.varlen_attention(q, k, v, cu_q, cu_k, scale, causal)
    return out, lse.t().contiguous().t()  # stored head-major: stride(0) == 1 as upstream


def _varlen_host(q, k, v, cu_q, cu_k, scale, causal):
    return host.varlen_attention(q, k, v, cu_q.contiguous(), cu_k.contiguous(), scale, causal)


def _varlen_accepts(q, k, v, *_):
    return (q.dtype == torch.bfloat16 and host_shapes_ok(q.shape[-1], v.shape[-1], q.shape[1] // k.shape[1])
            and all(t.stride(-1) == 1 for t in (q, k, v)))


TABLE = BackendTable(LIB)
TABLE.register("sparse_decode", reference=_sparse_decode_ref,
               host=Impl(host.sparse_decode, "every cache format, one or two KV scopes"))
TABLE.register("dense_decode", reference=reference.dense_decode,
               host=Impl(host.dense_decode, "BF16 q, d_qk even and <= 576, d_v % 32 == 0, <= 128 q heads per kv head",
                         _dense_accepts))
TABLE.register("sparse_prefill", reference=reference.sparse_prefill, host=host.sparse_prefill)
TABLE.register("varlen_attention", reference=_varlen_ref,
               host=Impl(_varlen_host, "BF16 with unit last strides, d_qk even and <= 576, d_v % 32 == 0",
                         _varlen_accepts))

TABLE.add_ascend("sparse_decode", Impl(
    ascend_sparse.sparse_decode, "d_qk 512 or 576, h_q a multiple of 16 (<= 64) or of 64; every cache format, "
    "V4.1 in either placement", ascend_sparse.decode_accepts))
TABLE.add_ascend("sparse_prefill", Impl(
    ascend_sparse.sparse_prefill, "d_qk 512 or 576, h_q a multiple of 16 (<= 64) or of 64",
    ascend_sparse.prefill_accepts))
TABLE.add_ascend("dense_decode", Impl(
    ascend_dense.dense_decode, "BF16/FP16 paged cache, d_qk % 16 == 0 and <= 576, d_v % 64 == 0 and <= 512, any "
    "h_q / h_kv", ascend_dense.decode_accepts))
TABLE.add_ascend("varlen_attention", Impl(
    ascend_dense.varlen_attention, "BF16 with unit last strides, d_qk % 16 == 0 and <= 576, d_v % 64 == 0 and "
    "<= 512, any h_q / h_kv", ascend_dense.varlen_accepts))


# KV-cache helpers with tensor work (kv_cache.convert_kv_layout)
TABLE.register("convert_kv_layout", reference=reference.relayout_reference,
               host=Impl(host.kv_relayout, "V4.1 caches, compact tokens in any block stride"))
TABLE.add_ascend("convert_kv_layout", Impl(ascend_relayout.kv_relayout,
                                           "V4.1 caches, compact tokens in any block stride"))


def run(name: str, device, *args):
    return TABLE.run(name, device, *args)
