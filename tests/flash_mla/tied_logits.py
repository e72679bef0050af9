"""Inputs whose top logit, 2^25, is tied between two tokens: in FP32 the logsumexp m + log 2 rounds to m, so
only weights normalised by their own sum (softmax) give the exact answer, the mean of the two tokens' values.
Every other logit is 0 (its weight exp(-2^25) is 0). Shared by the host and the Ascend-twin tests."""
from __future__ import annotations

import torch

from flash_mla.kv_cache import KVCacheFormat, dequantize_k_cache, quantize_k_cache
from flash_mla.reference.sparse import KVScope

SCALE = 2.0 ** 20     # q . k = 32 on the tied tokens: logits 2^25
TIED = (3, 11)        # the two tokens (or cache slots) carrying the top logit


def keys(n: int, d: int, seed: int) -> torch.Tensor:
    """[n, d] fp32 keys: dim 0 is 32 on the tied tokens and 0 elsewhere; the other dims randn/10 (the values)."""
    k = torch.randn(n, d, generator=torch.Generator().manual_seed(seed)) / 10
    k[:, 0] = 0.0
    k[list(TIED), 0] = 32.0
    return k.bfloat16().float()


def queries(*shape: int) -> torch.Tensor:
    """bf16 queries that are 1 on dim 0 and 0 elsewhere: logit = SCALE * k[:, 0]."""
    q = torch.zeros(*shape)
    q[..., 0] = 1.0
    return q.bfloat16()


def expected(k: torch.Tensor, d_v: int) -> torch.Tensor:
    """The exact output [d_v] (fp32) every query row must give: the tied tokens' mean value."""
    return (k[TIED[0], :d_v] + k[TIED[1], :d_v]) / 2


def prefill(s_q: int, h_q: int, s_kv: int = 40, topk: int = 24):
    """(q [s_q, h_q, 512], kv [s_kv, 1, 512], indices [s_q, 1, topk] over the first topk tokens, expected [512])."""
    k = keys(s_kv, 512, seed=1)
    idx = torch.arange(topk, dtype=torch.int32).flip(0).view(1, 1, topk).repeat(s_q, 1, 1)
    return queries(s_q, h_q, 512), k.bfloat16().view(s_kv, 1, 512), idx, expected(k, 512)


def decode(b: int, h_q: int, fmt: KVCacheFormat = KVCacheFormat.V41_FP8, page: int = 16, num_blocks: int = 3,
           topk: int = 16):
    """(q [b, 1, h_q, d_qk], [KVScope] over a quantised cache, expected [512] from the dequantised values)."""
    n = page * num_blocks
    k = keys(n, fmt.d_qk, seed=2)
    cache = quantize_k_cache(k.bfloat16().view(num_blocks, page, 1, fmt.d_qk), fmt, "interleaved")
    k_read = dequantize_k_cache(cache, fmt, "interleaved").float().view(n, fmt.d_qk)
    assert torch.equal(k_read[:, 0], k[:, 0])  # powers of two survive quantisation: the tie and 2^25 hold
    idx = torch.arange(topk, dtype=torch.int32).view(1, 1, topk).repeat(b, 1, 1)
    return queries(b, 1, h_q, fmt.d_qk), [KVScope(cache, fmt, "interleaved", idx)], expected(k_read, 512)
