"""MQA logits (lightning indexer): FP8 and FP4, clean/compressed outputs, paged decode cache."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_paged_metadata_next_n_weighs_rows():
    # requests of 2 rows, each sized by its last row: 2, 1 and 3 splits x 2 rows = prefix 4, 6, 12
    context_lens = torch.tensor([[100, 300], [10, 20], [600, 700]], dtype=torch.int32)
    meta = deep_gemm.get_paged_mqa_logits_metadata(context_lens, 64, 4)
    assert meta.tolist() == [[0, 0], [0, 1], [4, 0], [4, 1], [6, 0]]


def test_paged_metadata_varlen_splits_per_request():
    # runs of equal indices are requests: rows 0-2 (302 -> 2 splits x 3), row 3 (1 x 1), rows 4-5 (513 -> 3 x 2);
    # 13 units over 3 workers: 5, 4, 4 (the remainder to the first worker)
    indices = torch.tensor([0, 0, 0, 1, 2, 2], dtype=torch.int32)
    context_lens = torch.tensor([[300], [301], [302], [10], [500], [513]], dtype=torch.int32)
    meta = deep_gemm.get_paged_mqa_logits_metadata(context_lens, 64, 3, indices=indices)
    assert meta.tolist() == [[0, 0], [0, 1], [4, 1], [6, 0]]
    one_d = deep_gemm.get_paged_mqa_logits_metadata(torch.tensor([1000, 10, 600], dtype=torch.int32), 64, 4)
    assert one_d.tolist() == [[0, 0], [0, 2], [1, 0], [2, 1], [3, 0]]



@settings(max_examples=40, deadline=None)
@given(lens=st.lists(st.integers(0, 3000), min_size=0, max_size=24), next_n=st.sampled_from([1, 2, 3]),
       num_sms=st.integers(1, 40), varlen=st.booleans(), data=st.data())
def test_paged_metadata_host_matches_the_reference(lens, next_n, num_sms, varlen, data):
    """The host scheduler against the reference, fixed-length, varlen and 1-D forms."""
    if varlen:
        context_lens = torch.tensor(lens, dtype=torch.int32).view(-1, 1)
        steps = data.draw(st.lists(st.booleans(), min_size=len(lens), max_size=len(lens)))
        indices = torch.tensor(steps, dtype=torch.int32).cumsum(0).to(torch.int32)
    else:
        lens = lens[:len(lens) // next_n * next_n]
        context_lens = torch.tensor(lens, dtype=torch.int32).view(-1, next_n)
        if next_n == 1 and data.draw(st.booleans()):
            context_lens = context_lens.flatten()
        indices = None
    entry = deep_gemm._dispatch.TABLE["paged_mqa_logits_metadata"]
    got = entry.host.fn(context_lens, indices, num_sms)
    want = entry.reference.fn(context_lens, indices, num_sms)
    assert got.dtype == torch.int32 and got.tolist() == want.tolist()

def _upstream_paged_inputs(raw_batch, tokens_per_seq, seq_lens, heads, d, block_kv, fp4):
    """Inputs built as upstream's varlen test builds them: per-sequence page tables repeated per query
    token, per-token lengths ``seq_len + offset in the sequence``, ``indices`` naming each token's sequence."""
    tokens = sum(tokens_per_seq)
    max_lens = [n + t - 1 for n, t in zip(seq_lens, tokens_per_seq, strict=True)]
    pages_per_seq = [-(-n // block_kv) for n in max_lens]
    num_blocks = sum(pages_per_seq)
    pool = torch.randperm(num_blocks, dtype=torch.int32)
    table = torch.zeros(raw_batch, max(pages_per_seq), dtype=torch.int32)
    kv = randn(raw_batch, max(pages_per_seq) * block_kv, d)
    cache, offset = torch.zeros(num_blocks, block_kv, 1, (d // 2 if fp4 else d) + 4, dtype=torch.uint8), 0
    for s, n in enumerate(pages_per_seq):
        table[s, :n] = pool[offset:offset + n]
        part, _ = _paged_cache(kv[s, :n * block_kv], block_kv, fp4, num_blocks, table[s, :n].tolist())
        cache |= part
        offset += n
    counts = torch.tensor(tokens_per_seq)
    indices = torch.arange(raw_batch, dtype=torch.int32).repeat_interleave(counts)
    offsets = torch.cat([torch.arange(t, dtype=torch.int32) for t in tokens_per_seq])
    context_lens = (torch.tensor(seq_lens, dtype=torch.int32).repeat_interleave(counts) + offsets).view(tokens, 1)
    return kv, cache, table.repeat_interleave(counts, dim=0), indices, context_lens, max(pages_per_seq) * block_kv


@pytest.mark.parametrize("fp4", [False, True])
def test_paged_mqa_logits_varlen_reads_each_tokens_row(backend, fp4):
    heads, d, block_kv = 16, 128, 32
    kv, cache, table, indices, context_lens, max_ctx = _upstream_paged_inputs(3, [2, 1, 3], [70, 33, 100], heads, d,
                                                                             block_kv, fp4)
    tokens = indices.numel()
    q = randn(tokens, 1, heads, d)
    qq, _ = _quant_q(q.view(tokens, heads, d), fp4)
    qq = (qq[0].view(tokens, 1, heads, -1), None if qq[1] is None else qq[1].view(tokens, 1, heads))
    weights = torch.randn(tokens, heads)
    meta = deep_gemm.get_paged_mqa_logits_metadata(context_lens, block_kv, deep_gemm.get_num_sms(), indices=indices)
    logits = deep_gemm.fp8_fp4_paged_mqa_logits(qq, cache, weights, context_lens, table, meta, max_ctx,
                                                clean_logits=True, indices=indices)
    got, want = [], []
    for i in range(tokens):
        n, seq = int(context_lens[i, 0]), int(indices[i])
        want.append(torch.einsum("hd,nd->hn", q[i, 0].float(), kv[seq, :n].float()).relu().t() @ weights[i])
        got.append(logits[i, :n])
        assert bool((logits[i, n:] == float("-inf")).all())
    assert calc_diff(torch.cat(got), torch.cat(want)) < (0.02 if fp4 else 1e-3)


def test_paged_mqa_logits_1d_context_lens(backend):
    """Upstream's 1-D ``context_lens [B]``: row (b, t) sees positions up to ``context_lens[b] - next_n + t``."""
    batch, next_n, heads, d, block_kv, max_ctx = 2, 3, 8, 64, 32, 128
    perm = torch.randperm(batch * 4).view(batch, 4).to(torch.int32)
    kv = randn(batch, max_ctx, d)
    cache = torch.zeros(batch * 4, block_kv, 1, d + 4, dtype=torch.uint8)
    for b in range(batch):
        cache |= _paged_cache(kv[b], block_kv, False, batch * 4, perm[b].tolist())[0]
    lens_1d = torch.tensor([90, 2], dtype=torch.int32)         # the second: rows see -1 (none), 0 and 0..1
    q, weights = randn(batch, next_n, heads, d), torch.randn(batch * next_n, heads)
    qq = (q.to(torch.float8_e4m3fn), None)
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens_1d, block_kv, deep_gemm.get_num_sms())
    logits = deep_gemm.fp8_fp4_paged_mqa_logits(qq, cache, weights, lens_1d, perm, meta, max_ctx, clean_logits=True)
    lens_2d = torch.tensor([[88, 89, 90], [0, 1, 2]], dtype=torch.int32)
    assert torch.equal(logits, deep_gemm.fp8_fp4_paged_mqa_logits(qq, cache, weights, lens_2d, perm, meta, max_ctx,
                                                                  clean_logits=True))
    for b in range(batch):
        kv_back = _quant_kv(kv[b], False)[1]
        for t in range(next_n):
            n = int(lens_1d[b]) - next_n + t + 1
            row = logits[b * next_n + t]
            assert bool((row[max(n, 0):] == float("-inf")).all())
            if n > 0:
                want = torch.einsum("hd,nd->hn", qq[0][b, t].float(), kv_back[:n]).relu().t()
                assert calc_diff(row[:n], want @ weights[b * next_n + t]) < 1e-5


def test_paged_metadata_and_logits_refuse_impossible_lengths():
    context_lens = torch.tensor([[10], [-3]], dtype=torch.int32)
    with pytest.raises(ValueError, match="context_lens: expected lengths >= 0, got -3 at flat index 1"):
        deep_gemm.get_paged_mqa_logits_metadata(context_lens, 64, 4)
    s, s_kv, h, d = 4, 32, 16, 64
    (qq, _), (qkv, _) = _quant_q(randn(s, h, d), False), _quant_kv(randn(s_kv, d), False)
    ks, ke = _ranges(s, s_kv, False)
    with pytest.raises(ValueError, match=r"max_seqlen_k: expected a value in \[0, 2147483647\], got 1099511627776"):
        deep_gemm.fp8_mqa_logits(qq[0], qkv, torch.randn(s, h), ks, ke, clean_logits=False, max_seqlen_k=2**40)


@pytest.mark.parametrize(("head_dim", "backend"), [(128, "host"), (64, "reference")])
def test_paged_fp4_int16_scales_read_the_mx_cache(monkeypatch, head_dim, backend):
    """An FP4 query with int16-packed scales (DeepGEMM-Ascend's form) reads the MX cache, 2 * D/64 scale
    bytes a token: at D = 128 byte for byte NVIDIA's FP4 rows (the host kernel serves it), at D = 64 34-byte
    rows (the reference serves it). Against logits built from the dense values by hand."""
    from deep_gemm import _dispatch, formats
    from deep_gemm.attention import PagedKV, Quantised
    monkeypatch.setenv("DG_BACKEND", "host")
    pages, block_kv, heads, ctx = 3, 64, 4, 150
    codes = torch.randint(0, 16, (pages, block_kv, head_dim), dtype=torch.uint8)
    exps = torch.randint(124, 130, (pages, block_kv, head_dim // 32), dtype=torch.uint8)
    cache = torch.cat([formats.pack_fp4_codes(codes).view(torch.uint8).view(pages, -1),
                       exps.view(pages, -1)], 1).view(pages, block_kv, 1, -1)
    assert cache.size(-1) == head_dim // 2 + head_dim // 32
    kv = formats.unpack_fp4(formats.pack_fp4_codes(codes)) * torch.exp2(exps.float() - 127).repeat_interleave(32, -1)
    q_codes = formats.pack_fp4_codes(torch.randint(0, 16, (1, 1, heads, head_dim), dtype=torch.uint8))
    q_exps = torch.randint(124, 130, (1, 1, heads, head_dim // 32), dtype=torch.uint8)
    q = formats.unpack_fp4(q_codes) * torch.exp2(q_exps.float() - 127).repeat_interleave(32, -1)
    weights, lens, table = torch.randn(1, heads), torch.tensor([[ctx]], dtype=torch.int32), \
        torch.tensor([[2, 0, 1]], dtype=torch.int32)
    query = Quantised(q_codes, q_exps.float(), True, False)
    assert _dispatch.TABLE.serves("paged_mqa_logits", q.device, query, PagedKV(cache, True, head_dim, True),
                                  weights, lens, table, torch.empty(1, ctx), True) == backend
    meta = torch.zeros(deep_gemm.get_num_sms() + 1, 2, dtype=torch.int32)
    got = deep_gemm.fp8_fp4_paged_mqa_logits((q_codes, q_exps.view(torch.int16)), cache, weights, lens, table,
                                             meta, ctx, clean_logits=True)
    keys = kv[table[0].long()].reshape(-1, head_dim)[:ctx]
    want = ((q[0, 0] @ keys.T).relu() * weights[0, :, None]).sum(0)
    assert calc_diff(got[0], want) < 1e-9
