"""The FP32 reference against small cases computed by hand."""
import math

import torch

from flash_mla import reference
from flash_mla.kv_cache import KVCacheFormat, quantize_k_cache
from flash_mla.reference.sparse import KVScope


def test_prefill_two_tokens_by_hand():
    # one query, one head, d_qk 4, d_v 2; logits are scale * [2, 0] plus an ignored out-of-range id.
    q = torch.tensor([[[1.0, 1.0, 0.0, 0.0]]])
    kv = torch.tensor([[[1.0, 1.0, 5.0, 5.0]], [[0.0, 0.0, 3.0, 3.0]]])
    indices = torch.tensor([[[0, 1, 7]]], dtype=torch.int32)
    out, max_logits, lse = reference.sparse_prefill(q, kv, indices, 0.5, 2, None, None)
    e = math.exp(1.0)
    assert torch.allclose(out.float(), torch.tensor([[[e / (e + 1), e / (e + 1)]]]), atol=4e-3)  # bf16 output
    assert abs(max_logits.item() - 1.0) < 1e-6
    assert abs(lse.item() - math.log(e + 1)) < 1e-6


def test_prefill_sink_length_and_empty_rows():
    q = torch.tensor([[[1.0, 0.0]], [[1.0, 0.0]], [[1.0, 0.0]]])
    kv = torch.tensor([[[2.0, 4.0]], [[0.0, 8.0]]])
    indices = torch.tensor([[[0, 1]], [[1, 0]], [[-1, 5]]], dtype=torch.int32)
    topk_length = torch.tensor([1, 2, 2], dtype=torch.int32)
    sink = torch.tensor([0.0])
    out, max_logits, lse = reference.sparse_prefill(q, kv, indices, 1.0, 2, sink, topk_length)
    # row 0 sees only token 0 (logit 2): out = V0 * e^2 / (e^2 + e^0)
    w = math.exp(2) / (math.exp(2) + 1)
    assert torch.allclose(out[0].float(), torch.tensor([[2 * w, 4 * w]]), rtol=8e-3)
    assert abs(lse[0].item() - 2.0) < 1e-6 and abs(max_logits[0].item() - 2.0) < 1e-6
    # row 2 has no valid token: zero output, lse +inf, max -inf regardless of the sink
    assert out[2].float().abs().max() == 0 and lse[2].item() == math.inf and max_logits[2].item() == -math.inf


def test_decode_over_quantised_cache_by_hand():
    # tokens of value c * ones: exactly representable, so K is known; one request, two query rows.
    fmt = KVCacheFormat.V41_FP8
    k = torch.zeros(1, 4, 1, 512)
    for slot, c in enumerate([1.0, 0.5, -1.0, 0.25]):
        k[0, slot] = c
    cache = quantize_k_cache(k.bfloat16(), fmt)
    q = torch.zeros(1, 2, 64, 512)
    q[..., 0] = 1.0
    indices = torch.tensor([[[0, 1, -1], [2, 3, 1]]], dtype=torch.int32)
    scope = KVScope(cache, fmt, "interleaved", indices, torch.tensor([2], dtype=torch.int32))
    out, lse = reference.sparse_decode(q.bfloat16(), [scope], 1.0, 512, None)
    assert lse.shape == (1, 64, 2)
    # row 0: logits [1, 0.5]; row 1 (length 2): tokens 2, 3 -> logits [-1, 0.25]
    for row, (l0, l1), (v0, v1) in ((0, (1.0, 0.5), (1.0, 0.5)), (1, (-1.0, 0.25), (-1.0, 0.25))):
        z = math.exp(l0) + math.exp(l1)
        assert abs(lse[0, 0, row].item() - math.log(z)) < 1e-6
        assert abs(out[0, row, 0, 7].item() - (math.exp(l0) * v0 + math.exp(l1) * v1) / z) < 4e-3
    sink = torch.full((64,), float("inf"))
    out_sink, lse_sink = reference.sparse_decode(q.bfloat16(), [scope], 1.0, 512, sink)
    assert out_sink.abs().max() == 0 and torch.equal(lse_sink, lse)


def test_dense_decode_causal_by_hand():
    # s_q 2 over 3 keys: row 0 sees keys 0..1, row 1 all three (bottom-right aligned).
    q = torch.zeros(1, 2, 1, 2)
    q[..., 0] = 1.0
    k_cache = torch.tensor([[[[0.0, 1.0]], [[1.0, 2.0]], [[2.0, 3.0]], [[float("nan"), 0.0]]]])
    out, lse = reference.dense_decode(q, k_cache, torch.tensor([[0]], dtype=torch.int32),
                                      torch.tensor([3], dtype=torch.int32), 1, 1.0, True)
    assert abs(lse[0, 0, 0].item() - math.log(1 + math.e)) < 1e-6
    assert abs(out[0, 0, 0, 0].item() - math.e / (1 + math.e)) < 1e-6
    z = 1 + math.e + math.e ** 2
    assert abs(out[0, 1, 0, 0].item() - (math.e + 2 * math.e ** 2) / z) < 1e-6
