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
    ``clean_logits``, else untouched). Compressed: column t is position ``ks[i] + t``, ``t < ke[i] - ks[i]``.
    As the Ascend kernel, the ranges are clamped to ``[0, S_kv)`` with tensor ops only (no host read)."""
    q, kv = q.dequantized(), kv.dequantized()
    full = _scores(q, kv, weights)
    seq_len_kv = kv.size(0)
    start, end = ks.long().clamp_min(0)[:, None], ke.long().clamp_max(seq_len_kv)[:, None]
    if not compressed:
        positions = torch.arange(seq_len_kv, device=q.device)[None, :]
        inside = (positions >= start) & (positions < end)
        if clean_logits:
            logits.copy_(full.masked_fill(~inside, float("-inf")).to(logits.dtype))
        else:
            logits.copy_(torch.where(inside, full.to(logits.dtype), logits))
        return
    if seq_len_kv == 0:
        return
    positions = start + torch.arange(logits.size(1), device=q.device)[None, :]  # column t: position ks + t
    picked = full.gather(1, positions.clamp_max(seq_len_kv - 1))
    logits.copy_(torch.where(positions < end, picked.to(logits.dtype), logits))


def paged_mqa_logits(q, kv_cache, weights: torch.Tensor, context_lens: torch.Tensor, block_table: torch.Tensor,
                     logits: torch.Tensor, clean_logits: bool) -> None:
    """q ``[B, next_n, H, D]`` and the paged cache (objects with ``dequantized()``); row (b, t) of logits
    sees positions ``[0, context_lens[b, t])`` through ``block_table[b]``; the rest is -inf when
    ``clean_logits``, else untouched. As the Ascend kernel, with tensor ops only (no host read): lengths
    are clamped to ``[0, min(block_table capacity, logits width)]``, and a position whose page id is
    outside ``[0, num_blocks)`` scores 0."""
    q, kv_pages = q.dequantized(), kv_cache.dequantized()
    batch, next_n = context_lens.shape
    num_blocks, block_kv, head_dim = kv_pages.shape
    if num_blocks == 0:  # no page to read (as the Ascend entry point): only the clean rows change
        if clean_logits:
            logits.fill_(float("-inf"))
        return
    capacity = min(block_table.size(1) * block_kv, logits.size(1))
    positions = torch.arange(capacity, device=q.device)  # a length past capacity covers them all
    ids = block_table[:, positions // block_kv].long()  # [B, capacity]
    live = (ids >= 0) & (ids < num_blocks)
    flat = kv_pages.reshape(-1, head_dim)
    rows = logits[:, :capacity].view(batch, next_n, capacity)
    for b in range(batch):
        kv = flat[ids[b].clamp(0, num_blocks - 1) * block_kv + positions % block_kv]
        scores = _scores(q[b], kv, weights[b * next_n:(b + 1) * next_n])
        scores = torch.where(live[b], scores, torch.zeros((), device=q.device))
        inside = positions[None, :] < context_lens[b][:, None]
        rest = torch.full_like(rows[b], float("-inf")) if clean_logits else rows[b]
        rows[b] = torch.where(inside, scores.to(logits.dtype), rest)
    if clean_logits:
        logits[:, capacity:] = float("-inf")


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
