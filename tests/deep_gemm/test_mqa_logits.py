"""MQA logits (lightning indexer): FP8 and FP4, clean/compressed outputs, paged decode cache."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import assert_bitwise_equal, calc_diff
from deep_gemm.testing.generators import randn
from deep_gemm.utils import cast_back_from_fp4, per_custom_dims_cast_to_fp8, per_token_cast_to_fp4


def _quant_q(q, fp4):
    if not fp4:
        return (q.to(torch.float8_e4m3fn), None), q.to(torch.float8_e4m3fn).float()
    s, h, d = q.shape
    packed, sf = per_token_cast_to_fp4(q.reshape(s * h, d), use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)
    back = cast_back_from_fp4(packed, sf, gran_k=32, use_packed_ue8m0=True).view(s, h, d)
    return (packed.view(s, h, d // 2), sf.view(s, h)), back


def _quant_kv(kv, fp4):
    if not fp4:
        q, sf = per_custom_dims_cast_to_fp8(kv, (0,), False)
        return (q, sf), q.float() * sf[:, None]
    packed, sf = per_token_cast_to_fp4(kv, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)
    return (packed, sf.view(-1)), cast_back_from_fp4(packed, sf, gran_k=32, use_packed_ue8m0=True)


def _ref(q, kv, weights, ks, ke):
    scores = torch.einsum("shd,nd->shn", q.float(), kv.float()).relu()
    logits = torch.einsum("shn,sh->sn", scores, weights.float())
    pos = torch.arange(kv.size(0))
    inside = (pos[None] >= ks[:, None]) & (pos[None] < ke[:, None])
    return logits.masked_fill(~inside, float("-inf")), inside


def _ranges(s, s_kv, context_parallel):
    if not context_parallel:
        return torch.zeros(s, dtype=torch.int32), torch.arange(s, dtype=torch.int32) + (s_kv - s)
    half, cp = s // 2, s_kv // s          # a context-parallel rank holding two chunks
    ks = torch.zeros(s, dtype=torch.int32)
    ke = torch.zeros(s, dtype=torch.int32)
    for i in range(half):
        ke[i] = (cp // 3) * half + i + 1
        ke[i + half] = (2 * cp - 1 - cp // 3) * half + i + 1
    ks[1::3] = 3
    return ks, ke


@pytest.mark.parametrize("fp4", [False, True])
@pytest.mark.parametrize("heads,head_dim", [(8, 64), (32, 128)])
@pytest.mark.parametrize("context_parallel", [False, True])
def test_mqa_logits(backend, fp4, heads, head_dim, context_parallel):
    s, s_kv = 16, 96
    q, kv, weights = randn(s, heads, head_dim), randn(s_kv, head_dim), torch.randn(s, heads)
    ks, ke = _ranges(s, s_kv, context_parallel)
    (qq, q_back), (qkv, kv_back) = _quant_q(q, fp4), _quant_kv(kv, fp4)
    logits = deep_gemm.fp8_fp4_mqa_logits(qq, qkv, weights, ks, ke)
    assert logits.shape == (s, s_kv) and logits.stride(0) % 256 == 0 and logits.stride(0) >= s_kv + 256
    ref, inside = _ref(q, kv, weights, ks, ke)
    assert torch.equal(logits == float("-inf"), ~inside), "-inf exactly outside [ks, ke)"
    assert calc_diff(logits[inside], ref[inside]) < (0.02 if fp4 else 1e-3)
    simulated, _ = _ref(q_back, kv_back, weights, ks, ke)
    assert calc_diff(logits[inside], simulated[inside]) < 5e-6
    for _ in range(3):
        assert_bitwise_equal(deep_gemm.fp8_fp4_mqa_logits(qq, qkv, weights, ks, ke), logits)
    # compressed: column t is position ks[i] + t
    width = int((ke - ks).max())
    packed = deep_gemm.fp8_fp4_mqa_logits(qq, qkv, weights, ks, ke, clean_logits=False, max_seqlen_k=width)
    assert packed.shape == (s, width) and packed.stride(0) % 256 == 0
    for i in range(s):
        n = int(ke[i] - ks[i])
        assert torch.equal(packed[i, :n], logits[i, int(ks[i]):int(ke[i])])


def test_mqa_logits_bf16_and_legacy(backend):
    s, s_kv, h, d = 8, 64, 16, 64
    q, kv, weights = randn(s, h, d), randn(s_kv, d), torch.randn(s, h)
    ks, ke = _ranges(s, s_kv, False)
    (qq, _), (qkv, _) = _quant_q(q, False), _quant_kv(kv, False)
    fp32 = deep_gemm.fp8_mqa_logits(qq[0], qkv, weights, ks, ke)
    bf16 = deep_gemm.fp8_fp4_mqa_logits(qq, qkv, weights.bfloat16(), ks, ke, logits_dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16 and bf16.stride(0) % 512 == 0
    _, inside = _ref(q, kv, weights, ks, ke)
    assert calc_diff(bf16[inside].float(), fp32[inside]) < 3e-5


def _paged_cache(kv, block_kv, fp4, num_blocks, order):
    """Scatter tokens into pages ``order`` of a fused cache: per page values first, then 4-byte scales."""
    d = kv.size(-1)
    (values, sf), back = _quant_kv(kv, fp4)
    value_bytes = d // 2 if fp4 else d
    cache = torch.zeros(num_blocks, block_kv * (value_bytes + 4), dtype=torch.uint8)
    values = values.view(torch.uint8).view(-1, block_kv, value_bytes)
    scales = sf.contiguous().view(torch.uint8).view(-1, block_kv * 4)
    for i, page in enumerate(order):
        cache[page, :block_kv * value_bytes] = values[i].flatten()
        cache[page, block_kv * value_bytes:] = scales[i]
    return cache.view(num_blocks, block_kv, 1, value_bytes + 4), back


@pytest.mark.parametrize("fp4", [False, True])
@pytest.mark.parametrize("next_n", [1, 2])
def test_paged_mqa_logits(backend, fp4, next_n):
    batch, heads, d, block_kv, max_ctx = 3, 16, 128, 32, 160
    pages_per_seq = max_ctx // block_kv
    num_blocks = batch * pages_per_seq + 2
    perm = torch.randperm(num_blocks)[:batch * pages_per_seq].view(batch, pages_per_seq).to(torch.int32)
    kv = randn(batch, max_ctx, d)
    cache_parts = [_paged_cache(kv[b], block_kv, fp4, num_blocks, perm[b].tolist()) for b in range(batch)]
    cache = sum(p[0].view(torch.uint8).to(torch.int32) for p in cache_parts).to(torch.uint8)
    context_lens = torch.tensor([[40 + 50 * b + t for t in range(next_n)] for b in range(batch)], dtype=torch.int32)
    q = randn(batch, next_n, heads, d)
    qq, _ = _quant_q(q.view(batch * next_n, heads, d), fp4)
    qq = (qq[0].view(batch, next_n, heads, -1), None if qq[1] is None else qq[1].view(batch, next_n, heads))
    weights = torch.randn(batch * next_n, heads)
    meta = deep_gemm.get_paged_mqa_logits_metadata(context_lens, block_kv, deep_gemm.get_num_sms())
    assert meta.shape == (deep_gemm.get_num_sms() + 1, 2)
    logits = deep_gemm.fp8_fp4_paged_mqa_logits(qq, cache, weights, context_lens, perm, meta, max_ctx,
                                                clean_logits=True)
    assert logits.shape == (batch * next_n, max_ctx)
    got, want = [], []
    for b in range(batch):
        for t in range(next_n):
            row, n = logits[b * next_n + t], int(context_lens[b, t])
            want.append(torch.einsum("hd,nd->hn", q[b, t].float(), kv[b, :n].float()).relu().t() @ weights[b * next_n + t])
            got.append(row[:n])
            assert bool((row[n:] == float("-inf")).all())
    assert calc_diff(torch.cat(got), torch.cat(want)) < (0.02 if fp4 else 1e-3)


def test_paged_metadata_balances_work():
    context_lens = torch.tensor([[1000], [10], [600]], dtype=torch.int32)     # 4 + 1 + 3 = 8 splits of 256
    meta = deep_gemm.get_paged_mqa_logits_metadata(context_lens, 64, 4)
    assert meta.tolist() == [[0, 0], [0, 2], [1, 0], [2, 1], [3, 0]]


def test_paged_metadata_and_logits_refuse_impossible_lengths():
    context_lens = torch.tensor([[10], [-3]], dtype=torch.int32)
    with pytest.raises(ValueError, match="context_lens: expected lengths >= 0, got -3 at flat index 1"):
        deep_gemm.get_paged_mqa_logits_metadata(context_lens, 64, 4)
    s, s_kv, h, d = 4, 32, 16, 64
    (qq, _), (qkv, _) = _quant_q(randn(s, h, d), False), _quant_kv(randn(s_kv, d), False)
    ks, ke = _ranges(s, s_kv, False)
    with pytest.raises(ValueError, match=r"max_seqlen_k: expected a value in \[0, 2147483647\], got 1099511627776"):
        deep_gemm.fp8_mqa_logits(qq[0], qkv, torch.randn(s, h), ks, ke, clean_logits=False, max_seqlen_k=2**40)
