"""Host (CPU) kernels: C++ sources compiled by deepjit on first use; these wrappers only launch them
with validated arguments and allocate outputs."""
from __future__ import annotations

import torch

from deepjit import descriptors

from .. import LIB
from ..reference.sparse import KVScope

_ARGS = "host/launch_args.hpp"


def _scope(s: KVScope | None) -> dict:
    if s is None:
        return {"cache": None, "block_stride": 0, "page_block_size": 1, "format": 0, "block_split": 0,
                "indices": None, "indices_b": 0, "indices_s": 0, "topk": 0, "topk_length": None}
    return {"cache": s.cache, "block_stride": s.cache.stride(0), "page_block_size": s.cache.shape[1],
            "format": s.fmt.spec.code, "block_split": int(s.placement == "block_split"), "indices": s.indices,
            "indices_b": s.indices.stride(0), "indices_s": s.indices.stride(1), "topk": s.indices.shape[-1],
            "topk_length": s.topk_length}


def sparse_decode(q: torch.Tensor, scopes: list[KVScope], sm_scale: float, d_v: int,
                  attn_sink: torch.Tensor | None, batch_invariant: bool) -> tuple[torch.Tensor, torch.Tensor]:
    b, s_q, h_q, d_qk = q.shape
    out = torch.empty(b, s_q, h_q, d_v, dtype=torch.bfloat16)
    lse = torch.empty(b, s_q, h_q, dtype=torch.float32)
    args = descriptors.pack(descriptors.struct_type(LIB.source(_ARGS), "SparseDecodeArgs"),
                            out=out, lse=lse, q=q, q_b=q.stride(0), q_s=q.stride(1), q_h=q.stride(2), b=b, s_q=s_q,
                            h_q=h_q, d_qk=d_qk, d_v=d_v, sm_scale=sm_scale, attn_sink=attn_sink,
                            scope0=_scope(scopes[0]), scope1=_scope(scopes[1] if len(scopes) > 1 else None))
    kernel = LIB.host_kernel("fmla_sparse_decode", "host/sparse_decode.cpp")
    kernel(descriptors.address(args), LIB.num_threads, 1 if batch_invariant else 64)
    return out, lse.transpose(1, 2)


def sparse_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int,
                   attn_sink: torch.Tensor | None,
                   topk_length: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    s_q, h_q, d_qk = q.shape
    out = torch.empty(s_q, h_q, d_v, dtype=torch.bfloat16)
    max_logits = torch.empty(s_q, h_q, dtype=torch.float32)
    lse = torch.empty(s_q, h_q, dtype=torch.float32)
    kernel = LIB.host_kernel("fmla_sparse_prefill", "host/sparse_prefill.cpp")
    kernel(out, max_logits, lse, q, q.stride(0), q.stride(1), kv, kv.stride(0), kv.shape[0], indices,
           indices.stride(0), indices.shape[-1], topk_length, s_q, h_q, d_qk, d_v, sm_scale, attn_sink,
           LIB.num_threads, 64)
    return out, max_logits, lse


def dense_decode(q: torch.Tensor, k_cache: torch.Tensor, block_table: torch.Tensor, cache_seqlens: torch.Tensor,
                 d_v: int, sm_scale: float, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    b, s_q, h_q, d_qk = q.shape
    out = torch.empty(b, s_q, h_q, d_v, dtype=q.dtype)
    lse = torch.empty(b, s_q, h_q, dtype=torch.float32)
    kernel = LIB.host_kernel("fmla_dense_decode", "host/dense_decode.cpp")
    kernel(out, lse, q, q.stride(0), q.stride(1), q.stride(2), b, s_q, h_q, k_cache.shape[2], d_qk, d_v, sm_scale,
           k_cache, k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), k_cache.shape[1], block_table,
           block_table.stride(0), cache_seqlens, int(causal), LIB.num_threads)
    return out, lse.transpose(1, 2)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_qo: torch.Tensor,
                     cu_seqlens_kv: torch.Tensor, softmax_scale: float, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    total_q, h_q, d_qk = q.shape
    out = torch.empty(total_q, h_q, v.shape[-1], dtype=q.dtype)
    lse = torch.empty(h_q, total_q, dtype=torch.float32)
    kernel = LIB.host_kernel("fmla_varlen_attention", "host/varlen_attention.cpp")
    kernel(out, lse, q, q.stride(0), q.stride(1), k, k.stride(0), k.stride(1), v, v.stride(0), v.stride(1),
           cu_seqlens_qo, cu_seqlens_kv, cu_seqlens_qo.numel() - 1, total_q, h_q, k.shape[1], d_qk, v.shape[-1],
           softmax_scale, int(causal), LIB.num_threads)
    return out, lse.t()
