"""Launchers of ``dense_attn.asc`` for the backend table's Ascend column.

``dense_decode(q, k_cache, block_table, cache_seqlens, d_v, sm_scale, causal)`` and
``varlen_attention(q, k, v, cu_q, cu_k, scale, causal)`` take the arguments of the reference functions
(already validated by ``flash_mla.interface``) and return what the CPU path returns: decode
``out [b, s_q, h_q, d_v]`` and ``lse [b, h_q, s_q]`` (a transposed view of ``[b, s_q, h_q]``); varlen
``out [total_q, h_q, d_v]`` and ``lse [total_q, h_q]`` stored head-major (``stride(0) == 1``).

What the kernel covers (``*_accepts``): BF16 or FP16, ``d_qk`` a multiple of 16 up to 576, ``d_v`` a multiple
of 64 up to 512 and ``d_qk`` (other forms run the reference), any ``h_q / h_kv`` ratio (GQA/MQA: a kv head's query heads and tokens
share the cube's 64 rows), unit last strides. No tensor value is read on the host: the kernel clamps
lengths, cu_seqlens and block ids into the tensors it reads.
"""
from __future__ import annotations

import torch

from deepjit import descriptors, kernel_args

from .._lib import LIB

ROWS_PER_BLOCK = 64   # kM of dense_attn_vec.h
RESCALE_SKIP = 8


def _dims_ok(d_qk: int, d_v: int) -> bool:   # d_v: whole 64-column registers (rescale_vf, finish_out_vf)
    return d_qk % 16 == 0 and d_v % 64 == 0 and 64 <= d_v <= min(d_qk, 512) and d_qk <= 576


_DTYPES = (torch.bfloat16, torch.float16)


def decode_accepts(q, k_cache, block_table, cache_seqlens, d_v, sm_scale, causal) -> bool:
    return q.dtype in _DTYPES and _dims_ok(q.shape[-1], d_v) and k_cache.stride(-1) == 1


def varlen_accepts(q, k, v, cu_q, cu_k, scale, causal) -> bool:
    return (q.dtype in _DTYPES and _dims_ok(q.shape[-1], v.shape[-1])
            and all(t.stride(-1) == 1 for t in (q, k, v)))


def _kernel(d_qk: int, d_v: int, fp16: bool):
    return LIB.ascend_kernel("fmla_dense_attn", "ascend/dense_attn.asc", {
        "FMLA_DQK": d_qk, "FMLA_DV": d_v, "FMLA_FP16": int(fp16), "FMLA_RESCALE_SKIP": RESCALE_SKIP})


def _launch(d_qk: int, d_v: int, items: int, q: torch.Tensor, **fields) -> None:
    if items == 0:
        return
    args = kernel_args.pack(descriptors.struct_type(LIB.source("ascend/kernel_args.h"), "FmlaDenseAttnArgs"),
                            q=q, **fields)
    _kernel(d_qk, d_v, q.dtype == torch.float16)(min(items, LIB.num_cube_cores(q.device)), args)


def _m_blocks(s_q: int, heads_per_kv: int) -> int:
    return max(1, -(-s_q * heads_per_kv // ROWS_PER_BLOCK))


def dense_decode(q: torch.Tensor, k_cache: torch.Tensor, block_table: torch.Tensor, cache_seqlens: torch.Tensor,
                 d_v: int, sm_scale: float, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    b, s_q, h_q, d_qk = q.shape
    num_blocks, page, h_kv, _ = k_cache.shape
    out = torch.empty(b, s_q, h_q, d_v, dtype=q.dtype, device=q.device)
    lse = torch.empty(b, s_q, h_q, dtype=torch.float32, device=q.device)
    hpk, m_blocks = h_q // h_kv, _m_blocks(s_q, h_q // h_kv)
    if num_blocks == 0 or block_table.shape[1] == 0:   # no key to read: every row is empty
        return out.zero_(), lse.fill_(float("inf")).transpose(1, 2)
    seqlens = cache_seqlens.contiguous()
    _launch(d_qk, d_v, b * h_kv * m_blocks * int(s_q > 0), q,
            k=k_cache, v=k_cache, out=out, lse=lse, block_table=block_table, seqlens=seqlens, cu_q=seqlens,
            cu_k=seqlens, paged=1, causal=int(causal), batch=b, h_kv=h_kv, heads_per_kv=hpk, max_s_q=s_q,
            m_blocks=m_blocks, q_seq=q.stride(0), q_tok=q.stride(1), q_head=q.stride(2), out_seq=out.stride(0),
            out_tok=out.stride(1), out_head=out.stride(2), lse_seq=lse.stride(0), lse_tok=lse.stride(1),
            lse_head=lse.stride(2), k_tok=k_cache.stride(1), k_head=k_cache.stride(2), k_block=k_cache.stride(0),
            v_tok=0, v_head=0, page=page, bt_row=block_table.stride(0), bt_cols=block_table.shape[1],
            num_blocks=num_blocks, total_q=s_q, total_k=0, sm_scale=float(sm_scale))
    return out, lse.transpose(1, 2)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor,
                     scale: float, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    total_q, h_q, d_qk = q.shape
    total_k, h_kv, d_v = v.shape
    batch = cu_q.numel() - 1
    # every sequence is given total_q query rows' worth of work items (those past its length end at
    # once): upstream's max_seqlen_qo would size this tighter, but it is a host int the kernel could
    # not check, and a wrong one would leave rows unwritten
    max_s_q = total_q
    out = torch.zeros(total_q, h_q, d_v, dtype=q.dtype, device=q.device)
    lse = torch.full((h_q, total_q), float("inf"), dtype=torch.float32, device=q.device)  # head-major
    hpk, m_blocks = h_q // h_kv, _m_blocks(max_s_q, h_q // h_kv)
    _launch(d_qk, d_v, batch * h_kv * m_blocks * int(max_s_q > 0), q,
            k=k, v=v, out=out, lse=lse, block_table=cu_q, seqlens=cu_q, cu_q=cu_q.contiguous(),
            cu_k=cu_k.contiguous(), paged=0, causal=int(causal), batch=batch, h_kv=h_kv, heads_per_kv=hpk,
            max_s_q=max_s_q, m_blocks=m_blocks, q_seq=0, q_tok=q.stride(0), q_head=q.stride(1), out_seq=0,
            out_tok=out.stride(0), out_head=out.stride(1), lse_seq=0, lse_tok=1, lse_head=total_q,
            k_tok=k.stride(0), k_head=k.stride(1), k_block=0, v_tok=v.stride(0), v_head=v.stride(1), page=1,
            bt_row=0, bt_cols=0, num_blocks=1, total_q=total_q, total_k=total_k, sm_scale=float(scale))
    return out, lse.t()
