"""Host (CPU) kernels: C++ sources compiled by deepjit on first use; these wrappers only launch them
with validated arguments and allocate outputs."""
from __future__ import annotations

import torch

from .. import LIB
from ..reference.sparse import KVScope


def _ptr(t: torch.Tensor | None):
    return None if t is None else t.data_ptr()


def _scope_args(s: KVScope | None) -> list:
    if s is None:
        return [None, 0, 1, 0, 0, None, 0, 0, 0, None]
    return [s.cache.data_ptr(), s.cache.stride(0), s.cache.shape[1], s.fmt.spec.code, int(s.placement == "block_split"),
            s.indices, s.indices.stride(0), s.indices.stride(1), s.indices.shape[-1], _ptr(s.topk_length)]


def sparse_decode(q: torch.Tensor, scopes: list[KVScope], sm_scale: float, d_v: int,
                  attn_sink: torch.Tensor | None, batch_invariant: bool) -> tuple[torch.Tensor, torch.Tensor]:
    b, s_q, h_q, d_qk = q.shape
    out = torch.empty(b, s_q, h_q, d_v, dtype=torch.bfloat16)
    lse = torch.empty(b, s_q, h_q, dtype=torch.float32)
    kernel = LIB.host_kernel("fmla_sparse_decode", "host/sparse_decode.cpp")
    kernel(out, lse, q, q.stride(0), q.stride(1), q.stride(2), b, s_q, h_q, d_qk, d_v, sm_scale, attn_sink,
           *_scope_args(scopes[0]), *_scope_args(scopes[1] if len(scopes) > 1 else None),
           LIB.num_threads, 1 if batch_invariant else 64)
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
