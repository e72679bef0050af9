"""Sparse MLA attention in FP32 over gathered tokens (decode over quantised caches, prefill over bf16 KV)."""
from __future__ import annotations

import torch

from .._operands import KVScope, dequantize_records, gather_records
from .dense import normalized_weights

INF = float("inf")


def _gather_scope(scope: KVScope) -> tuple[torch.Tensor, torch.Tensor]:
    """Dequantised tokens [b, s_q, topk, d] (fp32, NaN -> 0) and their validity [b, s_q, topk]."""
    b, s_q, topk = scope.indices.shape
    idx = scope.indices.long()
    valid = idx >= 0
    if scope.topk_length is not None:
        valid &= torch.arange(topk, device=idx.device).view(1, 1, topk) < scope.topk_length.view(b, 1, 1).long()
    ids = torch.where(valid, idx, torch.zeros_like(idx))
    k = dequantize_records(gather_records(scope.cache, scope.fmt, scope.placement, ids), scope.fmt).float()
    k = k.masked_fill(k.isnan(), 0.0).view(b, s_q, topk, -1)
    return k, valid


def _attend(q: torch.Tensor, k: torch.Tensor, valid: torch.Tensor, sm_scale: float, d_v: int,
            attn_sink: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [..., h, d], k [..., n, d], valid [..., n] -> out fp32 [..., h, d_v], lse and max logit [..., h].
    Rows without a valid token get out 0, lse +inf, max -inf; the sink scales only out."""
    logits = (q.float() @ k.transpose(-1, -2)) * sm_scale              # [..., h, n]
    logits = logits.masked_fill(~valid.unsqueeze(-2), -INF)
    lse = torch.logsumexp(logits, dim=-1)
    max_logits = logits.amax(dim=-1) if logits.shape[-1] > 0 else torch.full_like(lse, -INF)
    empty = lse == -INF
    out = normalized_weights(logits, empty.unsqueeze(-1)) @ k[..., :d_v]
    if attn_sink is not None:
        out = out / (1.0 + torch.exp(attn_sink.float() - lse)).unsqueeze(-1)
    out = out.masked_fill(empty.unsqueeze(-1), 0.0)
    lse = lse.masked_fill(empty, INF)
    return out, lse, max_logits


def sparse_decode(q: torch.Tensor, scopes: list[KVScope], sm_scale: float, d_v: int,
                  attn_sink: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """q [b, s_q, h_q, d] -> out bf16 [b, s_q, h_q, d_v], lse fp32 [b, h_q, s_q] (a transposed view)."""
    gathered = [_gather_scope(s) for s in scopes]
    k = torch.cat([g[0] for g in gathered], dim=2)
    valid = torch.cat([g[1] for g in gathered], dim=2)
    out, lse, _ = _attend(q, k, valid, sm_scale, d_v, attn_sink)
    return out.to(torch.bfloat16), lse.transpose(1, 2)


def sparse_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int,
                   attn_sink: torch.Tensor | None, topk_length: torch.Tensor | None,
                   chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [s_q, h_q, d], kv [s_kv, 1, d], indices [s_q, 1, topk] -> out bf16 [s_q, h_q, d_v],
    max_logits and lse fp32 [s_q, h_q]. Indices < 0 or >= s_kv, and those past topk_length, are ignored."""
    s_q, h_q, _ = q.shape
    s_kv = kv.shape[0]
    topk = indices.shape[-1]
    out = torch.empty(s_q, h_q, d_v, dtype=torch.bfloat16, device=q.device)
    max_logits = torch.empty(s_q, h_q, dtype=torch.float32, device=q.device)
    lse = torch.empty(s_q, h_q, dtype=torch.float32, device=q.device)
    kv2 = kv[:, 0, :]
    for start in range(0, s_q, chunk):  # bounded memory for long prefills
        end = min(s_q, start + chunk)
        idx = indices[start:end, 0, :].long()
        valid = (idx >= 0) & (idx < s_kv)
        if topk_length is not None:
            valid &= torch.arange(topk, device=idx.device).view(1, topk) < topk_length[start:end].view(-1, 1).long()
        k = kv2[torch.where(valid, idx, torch.zeros_like(idx))].float()
        o, l_, m = _attend(q[start:end], k, valid, sm_scale, d_v, attn_sink)
        out[start:end], lse[start:end], max_logits[start:end] = o.to(torch.bfloat16), l_, m
    return out, max_logits, lse
