"""MQA logits of the lightning indexer, on dequantised FP32 inputs.

``logits[i, j] = sum_h weights[i, h] * relu(q[i, h, :] . kv[j, :])`` with FP32 accumulation."""
from __future__ import annotations

import torch

SPLIT_KV = 256  # KV tokens per scheduled split


def _scores(q: torch.Tensor, kv: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """q ``[S, H, D]``, kv ``[N, D]``, weights ``[S, H]`` -> ``[S, N]``."""
    return torch.einsum("shn,sh->sn", torch.einsum("shd,nd->shn", q, kv).relu(), weights.float())


def mqa_logits(q, kv, weights: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor,
               logits: torch.Tensor, compressed: bool, clean_logits: bool) -> None:
    """q, kv: objects with ``dequantized()`` (``[S, H, D]`` and ``[S_kv, D]`` FP32).

    Uncompressed: column j is KV position j, written for ``ks[i] <= j < ke[i]`` (others -inf when
    ``clean_logits``, else untouched). Compressed: column t is position ``ks[i] + t``, ``t < ke[i] - ks[i]``."""
    q, kv = q.dequantized(), kv.dequantized()
    full = _scores(q, kv, weights)
    positions = torch.arange(kv.size(0), device=q.device)
    inside = (positions[None, :] >= ks[:, None]) & (positions[None, :] < ke[:, None])
    if not compressed:
        if clean_logits:
            logits.copy_(full.masked_fill(~inside, float("-inf")).to(logits.dtype))
        else:
            logits.copy_(torch.where(inside, full.to(logits.dtype), logits))
        return
    for i, (s, e) in enumerate(zip(ks.tolist(), ke.tolist(), strict=True)):
        if e > s:
            logits[i, :e - s] = full[i, s:e].to(logits.dtype)


def paged_mqa_logits(q, kv_cache, weights: torch.Tensor, context_lens: torch.Tensor, block_table: torch.Tensor,
                     logits: torch.Tensor, clean_logits: bool) -> None:
    """q ``[B, next_n, H, D]`` and the paged cache (objects with ``dequantized()``); row (b, t) of logits
    sees positions ``[0, context_lens[b, t])`` through ``block_table[b]``; the rest is -inf when
    ``clean_logits``, else untouched."""
    q, kv_pages = q.dequantized(), kv_cache.dequantized()
    batch, next_n = context_lens.shape
    block_kv = kv_pages.size(1)
    for b in range(batch):
        lens = context_lens[b].tolist()
        longest = max(lens) if lens else 0
        if longest == 0 and not clean_logits:
            continue
        pages = block_table[b][:-(-longest // block_kv)].long()
        kv = kv_pages[pages].reshape(-1, kv_pages.size(-1))[:longest]
        scores = _scores(q[b], kv, weights[b * next_n:(b + 1) * next_n])
        for t, length in enumerate(lens):
            row = logits[b * next_n + t]
            row[:length] = scores[t, :length].to(logits.dtype)
            if clean_logits:
                row[length:] = float("-inf")


def _request_runs(context_lens: torch.Tensor, indices: torch.Tensor | None) -> list[tuple[int, int, int]]:
    """(first query row, query rows, context length) per request, grouped as upstream's scheduler groups
    them: ``next_n`` rows per batch entry with the last row's length, or with varlen ``indices`` each
    maximal run of equal indices with the run's last row's length; 1-D lengths count one row per entry."""
    lens = [max(0, int(x)) for x in context_lens.flatten().tolist()]
    if context_lens.dim() == 1:
        return [(b, 1, n) for b, n in enumerate(lens)]
    next_n = context_lens.size(1)
    if indices is None:
        return [(b * next_n, next_n, lens[b * next_n + next_n - 1]) for b in range(context_lens.size(0))]
    runs, ids = [], indices.tolist()
    for t, request in enumerate(ids):
        if t and ids[t - 1] == request:
            first = runs.pop()[0]
            runs.append((first, t - first + 1, lens[t]))
        else:
            runs.append((t, 1, lens[t]))
    return runs


def paged_mqa_logits_metadata(context_lens: torch.Tensor, indices: torch.Tensor | None, num_sms: int) -> torch.Tensor:
    """int32 ``[num_sms + 1, 2]``: (first query row, 256-token KV split) where each worker starts; a
    request weighs ``ceil(context_len / 256) * rows``, the total cut evenly (remainder to the first
    workers); the last entry is the end sentinel ``(rows, 0)``."""
    runs = _request_runs(context_lens, indices)
    prefix, total = [], 0
    for _, rows, length in runs:
        total += -(-length // SPLIT_KV) * rows
        prefix.append(total)
    base, extra = divmod(total, num_sms)
    starts, request = [], 0
    for worker in range(num_sms + 1):
        work = worker * base + min(worker, extra)
        while request < len(runs) and prefix[request] <= work:
            request += 1
        if request < len(runs):
            first, rows, _ = runs[request]
            starts.append((first, (work - (prefix[request - 1] if request else 0)) // rows))
        else:
            starts.append((context_lens.numel(), 0))
    return torch.tensor(starts, dtype=torch.int32, device=context_lens.device)
