"""Dense attention in FP32: paged MLA decode (V = first d_v dims of K) and varlen MHA prefill.
Written with differentiable torch ops so autograd gives the varlen backward."""
from __future__ import annotations

import torch

INF = float("inf")


def _softmax_attend(q, k, v, scale: float, keep):
    """q [h, s_q, d], k/v [h, s_k, *] fp32, keep [s_q, s_k] bool -> out [h, s_q, d_v], lse [h, s_q]
    (rows with nothing to attend: out 0, lse +inf)."""
    logits = (q @ k.transpose(-1, -2)) * scale
    logits = logits.masked_fill(~keep, -INF)
    lse = torch.logsumexp(logits, dim=-1)
    empty = (lse == -INF).unsqueeze(-1)
    out = normalized_weights(logits, empty) @ v
    return out, lse.masked_fill(empty.squeeze(-1), INF)


def normalized_weights(logits: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim, divided by the weights' own sum as upstream's dense references
    (``torch.softmax``) and every kernel do: ``exp(logits - lse)`` would not sum to 1 once logits pass
    2^24, where FP32 lse rounds log(#tied maxima) away. ``empty`` rows (all -inf) get 0."""
    return torch.softmax(logits.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)


def _causal_keep(s_q: int, s_k: int, causal: bool, device) -> torch.Tensor:
    """Bottom-right aligned: query row r sees key j iff j <= s_k - s_q + r."""
    keep = torch.ones(s_q, s_k, dtype=torch.bool, device=device)
    return keep.tril(diagonal=s_k - s_q) if causal else keep


def dense_decode(q: torch.Tensor, k_cache: torch.Tensor, block_table: torch.Tensor, cache_seqlens: torch.Tensor,
                 d_v: int, sm_scale: float, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """q [b, s_q, h_q, d], k_cache [num_blocks, P, h_kv, d] -> out [b, s_q, h_q, d_v] (q's dtype),
    lse fp32 [b, h_q, s_q]. NaN in the cache outside the first cache_seqlens tokens never leaks."""
    b, s_q, h_q, d = q.shape
    p, h_kv = k_cache.shape[1], k_cache.shape[2]
    out = torch.zeros(b, s_q, h_q, d_v, dtype=q.dtype, device=q.device)
    lse = torch.empty(b, h_q, s_q, dtype=torch.float32, device=q.device)
    for i in range(b):
        s_k = int(cache_seqlens[i])
        n_blocks = (s_k + p - 1) // p
        k = k_cache[block_table[i, :n_blocks].long()].reshape(n_blocks * p, h_kv, d)[:s_k].float()
        k = k.masked_fill(k.isnan(), 0.0).transpose(0, 1).repeat_interleave(h_q // h_kv, dim=0)  # [h_q, s_k, d]
        o, l_ = _softmax_attend(q[i].float().transpose(0, 1), k, k[..., :d_v], sm_scale,
                                _causal_keep(s_q, s_k, causal, q.device))
        out[i] = o.transpose(0, 1).to(q.dtype)
        lse[i] = l_
    return out, lse


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_qo: torch.Tensor,
                     cu_seqlens_kv: torch.Tensor, softmax_scale: float,
                     causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """q [total_q, h_q, d], k [total_k, h_kv, d], v [total_k, h_kv, d_v] -> out [total_q, h_q, d_v]
    (q's dtype) and lse fp32 [total_q, h_q]; causal is bottom-right aligned per sequence."""
    h_q, h_kv = q.shape[1], k.shape[1]
    outs, lses = [], []
    for i in range(cu_seqlens_qo.numel() - 1):
        q0, q1 = int(cu_seqlens_qo[i]), int(cu_seqlens_qo[i + 1])
        k0, k1 = int(cu_seqlens_kv[i]), int(cu_seqlens_kv[i + 1])
        qi = q[q0:q1].float().transpose(0, 1)
        ki = k[k0:k1].float().transpose(0, 1).repeat_interleave(h_q // h_kv, dim=0)
        vi = v[k0:k1].float().transpose(0, 1).repeat_interleave(h_q // h_kv, dim=0)
        o, l_ = _softmax_attend(qi, ki, vi, softmax_scale, _causal_keep(q1 - q0, k1 - k0, causal, q.device))
        outs.append(o.transpose(0, 1))
        lses.append(l_.transpose(0, 1))
    out = torch.cat(outs, dim=0) if outs else q.new_zeros(0, h_q, v.shape[-1], dtype=torch.float32)
    lse = torch.cat(lses, dim=0) if lses else q.new_zeros(0, h_q, dtype=torch.float32)
    return out.to(q.dtype), lse
