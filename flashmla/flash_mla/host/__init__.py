"""Host (CPU) kernels: C++ sources compiled by deepjit on first use; these wrappers only launch them
with validated arguments and allocate outputs."""
from __future__ import annotations

import torch

from deepjit import descriptors

from .._lib import LIB
from .._operands import KVCacheFormat, KVScope

_ARGS = "host/launch_args.hpp"  # the named launch arguments of every kernel here


def _args(name: str, **fields):
    return descriptors.pack(descriptors.struct_type(LIB.source(_ARGS), name), **fields)


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
    args = _args("SparseDecodeArgs", out=out, lse=lse, q=q, q_b=q.stride(0), q_s=q.stride(1), q_h=q.stride(2), b=b,
                 s_q=s_q, h_q=h_q, d_qk=d_qk, d_v=d_v, sm_scale=sm_scale, attn_sink=attn_sink,
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
    args = _args("SparsePrefillArgs", out=out, max_logits=max_logits, lse=lse, q=q, q_s=q.stride(0), q_h=q.stride(1),
                 kv=kv, kv_s=kv.stride(0), s_kv=kv.shape[0], indices=indices, indices_s=indices.stride(0),
                 topk=indices.shape[-1], topk_length=topk_length, s_q=s_q, h_q=h_q, d_qk=d_qk, d_v=d_v,
                 sm_scale=sm_scale, attn_sink=attn_sink)
    LIB.host_kernel("fmla_sparse_prefill", "host/sparse_prefill.cpp")(descriptors.address(args), LIB.num_threads, 64)
    return out, max_logits, lse


def dense_decode(q: torch.Tensor, k_cache: torch.Tensor, block_table: torch.Tensor, cache_seqlens: torch.Tensor,
                 d_v: int, sm_scale: float, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    b, s_q, h_q, d_qk = q.shape
    out = torch.empty(b, s_q, h_q, d_v, dtype=q.dtype)
    lse = torch.empty(b, s_q, h_q, dtype=torch.float32)
    args = _args("DenseDecodeArgs", out=out, lse=lse, q=q, q_b=q.stride(0), q_s=q.stride(1), q_h=q.stride(2), b=b,
                 s_q=s_q, h_q=h_q, h_kv=k_cache.shape[2], d_qk=d_qk, d_v=d_v, sm_scale=sm_scale, k_cache=k_cache,
                 k_cache_0=k_cache.stride(0), k_cache_1=k_cache.stride(1), k_cache_2=k_cache.stride(2),
                 page_block_size=k_cache.shape[1], block_table=block_table, block_table_b=block_table.stride(0),
                 cache_seqlens=cache_seqlens, causal=int(causal))
    LIB.host_kernel("fmla_dense_decode", "host/dense_decode.cpp")(descriptors.address(args), LIB.num_threads)
    return out, lse.transpose(1, 2)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_qo: torch.Tensor,
                     cu_seqlens_kv: torch.Tensor, softmax_scale: float, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    total_q, h_q, d_qk = q.shape
    out = torch.empty(total_q, h_q, v.shape[-1], dtype=q.dtype)
    lse = torch.empty(h_q, total_q, dtype=torch.float32)
    args = _args("VarlenAttentionArgs", out=out, lse=lse, q=q, q_0=q.stride(0), q_1=q.stride(1), k=k, k_0=k.stride(0),
                 k_1=k.stride(1), v=v, v_0=v.stride(0), v_1=v.stride(1), cu_seqlens_q=cu_seqlens_qo,
                 cu_seqlens_k=cu_seqlens_kv, batch=cu_seqlens_qo.numel() - 1, total_q=total_q, h_q=h_q,
                 h_kv=k.shape[1], d_qk=d_qk, d_v=v.shape[-1], softmax_scale=softmax_scale, causal=int(causal))
    LIB.host_kernel("fmla_varlen_attention", "host/varlen_attention.cpp")(descriptors.address(args), LIB.num_threads)
    return out, lse.t()


def kv_relayout(quant_k_cache: torch.Tensor, fmt: KVCacheFormat, to: str) -> torch.Tensor:
    """A V4.1 cache in the other placement (kernel in host/kv_relayout.cpp), compact, same dtype."""
    nb, p = quant_k_cache.shape[0], quant_k_cache.shape[1]
    s = fmt.spec
    out = torch.empty(nb, p, 1, s.bytes_per_token, dtype=torch.uint8)
    if out.numel():
        LIB.host_kernel("fmla_kv_relayout", "host/kv_relayout.cpp")(
            out, quant_k_cache.view(torch.uint8), nb, p, quant_k_cache.stride(0), s.data_bytes, s.scale_bytes,
            int(to == "block_split"), LIB.num_threads)
    return out.view(quant_k_cache.dtype)
