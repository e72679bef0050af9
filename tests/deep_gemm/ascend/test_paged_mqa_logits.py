"""deep_gemm's hand-written Ascend paged MQA logits (deep_gemm/ascend/paged_mqa_logits.*) on deepjit's
Ascend twin, against deep_gemm.reference.paged_mqa_logits at upstream's FP8 tolerance (calc_diff < 1e-3):
the kernel walks shuffled block tables itself; few and many heads, head dims 32..128, pages of 32 and 64,
next_n 1..3, empty and ragged lengths, -inf past each length with clean_logits and untouched without,
BF16 logits, DeepGEMM-Ascend's MXFP8 form (int16-packed UE8M0 q scales over its MXFP8 cache, both
page layouts), and the public op (2-D and upstream's 1-D context_lens, varlen rows) through the table with
no host read of context_lens or block_table; the schedule metadata computed on the device there equals
the host scheduler's."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import deep_gemm
from deep_gemm import _dispatch, formats, reference
from deep_gemm.ascend.paged_mqa_logits import paged_mqa_logits
from deep_gemm.attention import PagedKV, Quantised
from deep_gemm.testing import calc_diff
from tests.deep_gemm._paged import fused_fp8_cache
from tests.testkit.host_reads import DeviceOnly, mark

SENTINEL = 2.0 ** 100  # exact in FP32 and BF16, and never a logit at these scales


def _inputs(batch, next_n, heads, head_dim, block_kv, max_ctx):
    pages = -(-max_ctx // block_kv)
    num_pages = batch * pages + 3
    table = torch.randperm(num_pages)[:batch * pages].view(batch, pages).to(torch.int32)
    q = torch.randn(batch, next_n, heads, head_dim).to(torch.float8_e4m3fn)
    weights = torch.randn(batch * next_n, heads)
    return Quantised(q, None, False, False), PagedKV(fused_fp8_cache(num_pages, block_kv, head_dim), False, head_dim), \
        weights, table


def _lengths(batch, next_n, max_ctx):
    lens = torch.randint(0, max_ctx + 1, (batch, next_n), dtype=torch.int32)
    lens[0] = 0                       # an entry with nothing to attend to
    lens[-1, -1] = max_ctx            # a full row
    return lens


def _check(batch, next_n, heads, head_dim, block_kv, max_ctx, clean, dtype=torch.float32):
    q, kv, weights, table = _inputs(batch, next_n, heads, head_dim, block_kv, max_ctx)
    lens = _lengths(batch, next_n, max_ctx)
    got = torch.full((batch * next_n, max_ctx), SENTINEL, dtype=dtype)
    want = got.clone()
    paged_mqa_logits(q, kv, weights, lens, table, got, clean)
    reference.paged_mqa_logits(q, kv, weights, lens, table, want, clean)
    written = (want != SENTINEL) & torch.isfinite(want)
    assert torch.equal(got == SENTINEL, want == SENTINEL), "written exactly where the reference writes"
    assert torch.equal(torch.isinf(got), torch.isinf(want)), "-inf exactly where the reference puts it"
    assert calc_diff(got[written].float(), want[written].float()) < 1e-3


@pytest.mark.parametrize(("batch", "next_n", "heads", "head_dim", "block_kv", "max_ctx"),
                         [(3, 1, 4, 32, 32, 300), (2, 2, 32, 128, 64, 520), (2, 3, 64, 64, 32, 200)])
def test_shapes_clean(batch, next_n, heads, head_dim, block_kv, max_ctx):
    _check(batch, next_n, heads, head_dim, block_kv, max_ctx, clean=True)


def test_one_core_reuses_an_entrys_kv_block_across_its_row_chunks(monkeypatch):
    """One block walks every tile: entry b's two chunks of rows (64 heads: two rows a tile, next_n 3)
    share its KV block, reloaded only where the chunks' longest lengths differ. The lowering of
    test_shapes_clean[2-3-64-64-32-200]."""
    from deep_gemm import runtime
    monkeypatch.setattr(runtime, "ascend_blocks", lambda cores: 1)
    _check(3, 3, 64, 64, 32, 200, clean=True)


def test_untouched_past_lengths_without_clean():
    _check(4, 2, 8, 64, 64, 330, clean=False)


def test_bf16_logits():
    _check(2, 1, 16, 64, 32, 150, clean=True, dtype=torch.bfloat16)


def test_out_of_range_values_stay_inside_the_tensors():
    # lengths past the table's capacity and page ids outside the cache are clamped / skipped in the
    # kernel (the public op does not read them on the Ascend path), never dereferenced
    q, kv, weights, table = _inputs(2, 1, 4, 32, 32, 64)
    table[1, 1] = 10_000
    lens = torch.tensor([[1000], [64]], dtype=torch.int32)
    logits = torch.full((2, 64), SENTINEL)
    paged_mqa_logits(q, kv, weights, lens, table, logits, True)
    want = torch.empty(2, 64)
    reference.paged_mqa_logits(q, kv, weights, torch.tensor([[64], [32]], dtype=torch.int32), table, want, True)
    assert calc_diff(logits[0], want[0]) < 1e-3 and calc_diff(logits[1, :32], want[1, :32]) < 1e-3


def test_pages_outside_the_cache_score_exactly_zero():
    # entry 0 loads a page of E4M3 NaN bytes (0x7F) into L1; entry 1's pages are outside the cache, so
    # its L1 rows stay stale, and an infinite weight turns any multiplied-in score into NaN: its
    # positions must still score exactly 0, as the kernel promises
    q, kv, weights, table = _inputs(2, 1, 4, 32, 32, 64)
    nan_page = int(table[0, 0])
    kv.cache.view(kv.cache.size(0), -1)[nan_page, :32 * 32] = 0x7F
    table[0, 1] = nan_page
    table[1] = torch.tensor([10_000, -1], dtype=torch.int32)
    weights[1, 0] = float("inf")
    lens = torch.tensor([[64], [64]], dtype=torch.int32)
    logits = torch.full((2, 64), SENTINEL)
    paged_mqa_logits(q, kv, weights, lens, table, logits, True)
    assert torch.equal(logits[1], torch.zeros(64))


def _marked(*args):
    """Copies of ``args`` (tensors, tuples of tensors, None) marked device-only for ``DeviceOnly``; the
    originals stay unmarked for the reference run."""
    def copy(x):
        if isinstance(x, tuple):
            return tuple(copy(t) for t in x)
        return None if x is None else mark(x.clone())[0]
    return tuple(copy(x) for x in args)


def _mxfp8_cache(num_pages, block_kv, head_dim, nz, fp4=False):
    """DeepGEMM-Ascend's MX cache and the FP32 values it stands for: per page the E4M3 (``fp4``: packed
    E2M1) values, then per token its int16 pairs of UE8M0 per-32 exponents (low byte: the first 32); with
    ``nz`` (use_ascend_kv_layout) values [bytes/32, block_kv, 32] and pairs [block_kv/16, D/64, 16] per page."""
    if fp4:
        codes = torch.randint(0, 16, (num_pages, block_kv, head_dim), dtype=torch.uint8)
        values = formats.pack_fp4_codes(codes).view(torch.uint8)
        plain = formats.unpack_fp4(values)
    else:
        values = torch.randn(num_pages, block_kv, head_dim).to(torch.float8_e4m3fn)
        plain = values.float()
    exponents = torch.randint(122, 132, (num_pages, block_kv, head_dim // 32), dtype=torch.uint8)
    dense = plain * torch.pow(2.0, exponents.float() - 127).repeat_interleave(32, -1)
    words = exponents.view(torch.int16)
    if nz:
        values = values.view(num_pages, block_kv, values.size(-1) // 32, 32).transpose(1, 2)
        words = words.view(num_pages, block_kv // 16, 16, -1).transpose(2, 3)
    page = torch.cat([values.contiguous().view(torch.uint8).view(num_pages, -1),
                      words.contiguous().view(torch.uint8).view(num_pages, -1)], 1)
    return page.view(num_pages, block_kv, 1, -1), dense


# two shape classes: 64 heads x 128 (one token per tile, pages of 64, rows layout) and 8 heads x 64
# (several tokens per tile, next_n 2, pages of 128, fractal layout); KV tails in both
@pytest.mark.parametrize(("batch", "next_n", "heads", "head_dim", "block_kv", "max_ctx", "nz"),
                         [(2, 1, 64, 128, 64, 300, False), (2, 2, 8, 64, 128, 200, True)])
def test_mxfp8_cache_in_both_page_layouts(monkeypatch, batch, next_n, heads, head_dim, block_kv, max_ctx, nz):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    pages = -(-max_ctx // block_kv)
    cache, dense = _mxfp8_cache(batch * pages + 1, block_kv, head_dim, nz)
    table = torch.randperm(batch * pages + 1)[:batch * pages].view(batch, pages).to(torch.int32)
    q = torch.randn(batch, next_n, heads, head_dim).to(torch.float8_e4m3fn)
    q_exp = torch.randint(122, 132, (batch, next_n, heads, head_dim // 32), dtype=torch.uint8)
    weights = torch.randn(batch * next_n, heads).bfloat16()
    lens = _lengths(batch, next_n, max_ctx)
    meta = torch.zeros(deep_gemm.get_num_sms() + 1, 2, dtype=torch.int32)
    query = Quantised(q, torch.pow(2.0, q_exp.float() - 127), False, False)
    kv = PagedKV(cache, False, head_dim, True, nz)
    assert torch.equal(kv.dequantized(), dense), "the reference reads the cache as built"
    logits = torch.empty(batch * next_n, max_ctx, dtype=torch.bfloat16)
    assert _dispatch.TABLE.serves("paged_mqa_logits", q.device, query, kv, weights, lens, table, logits,
                                  True) == "ascend"
    with DeviceOnly():
        got = deep_gemm.fp8_fp4_paged_mqa_logits(*_marked((q, q_exp.view(torch.int16)), cache, weights, lens, table,
                                                          meta), max_ctx, clean_logits=True,
                                                 logits_dtype=torch.bfloat16, use_ascend_kv_layout=nz)
    want = torch.empty(batch * next_n, max_ctx)
    reference.paged_mqa_logits(query, kv, weights, lens, table, want, True)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite].float(), want[finite]) < 1e-3


# E4M3 q with per-32 power-of-two scales (FP32) over upstream's fused FP32-scaled cache: the MX product with
# 2^0 KV scales, the page's scale after it; two shape classes with KV tails (one token a tile at 64 heads,
# several at 8 with next_n 2)
@pytest.mark.parametrize(("batch", "next_n", "heads", "head_dim", "block_kv", "max_ctx"),
                         [(2, 1, 64, 128, 64, 300), (2, 2, 8, 64, 32, 150)])
def test_scaled_fp8_q_over_the_fused_cache(monkeypatch, batch, next_n, heads, head_dim, block_kv, max_ctx):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    q, kv, weights, table = _inputs(batch, next_n, heads, head_dim, block_kv, max_ctx)
    q_sf = torch.exp2(torch.randint(-5, 6, (batch, next_n, heads, head_dim // 32)).float())
    query = Quantised(q.data, q_sf, False, False)
    lens = _lengths(batch, next_n, max_ctx)
    meta = torch.zeros(deep_gemm.get_num_sms() + 1, 2, dtype=torch.int32)
    assert _dispatch.TABLE.serves("paged_mqa_logits", q.data.device, query, kv, weights, lens, table,
                                  torch.empty(batch * next_n, max_ctx), True) == "ascend"
    # q_sf stays unmarked: on CPU tensors the op checks FP32 scales are powers of two (NPU tensors skip
    # that read, _operands.sf_to_fp32); every other input is device-only
    q_data, *rest = _marked(q.data, kv.cache, weights, lens, table, meta)
    with DeviceOnly():
        got = deep_gemm.fp8_fp4_paged_mqa_logits((q_data, q_sf), *rest, max_ctx, clean_logits=True)
    want = torch.empty(batch * next_n, max_ctx)
    reference.paged_mqa_logits(query, kv, weights, lens, table, want, True)
    unscaled = torch.empty(batch * next_n, max_ctx)
    reference.paged_mqa_logits(q, kv, weights, lens, table, unscaled, True)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3
    assert calc_diff(got[finite], unscaled[finite]) > 1e-2, "the query's scales are applied"


# FP4 q (per-32 scales) over the FP4 cache (per page the packed values, then per token an int32 of four
# UE8M0 exponents), two shape classes with KV tails
@pytest.mark.parametrize(("batch", "next_n", "heads", "head_dim", "block_kv", "max_ctx"),
                         [(2, 2, 8, 128, 64, 200), (2, 1, 64, 64, 32, 150)])
def test_fp4_q_over_the_fp4_cache(batch, next_n, heads, head_dim, block_kv, max_ctx):
    pages = -(-max_ctx // block_kv)
    num_pages = batch * pages + 1
    values = formats.pack_fp4_codes(torch.randint(0, 16, (num_pages, block_kv, head_dim), dtype=torch.uint8))
    words = torch.randint(122, 132, (num_pages, block_kv, 4), dtype=torch.uint8)
    cache = torch.cat([values.view(torch.uint8).view(num_pages, -1), words.view(num_pages, -1)], 1)
    kv = PagedKV(cache.view(num_pages, block_kv, 1, head_dim // 2 + 4), True, head_dim)
    table = torch.randperm(num_pages)[:batch * pages].view(batch, pages).to(torch.int32)
    q_codes = torch.randint(0, 16, (batch, next_n, heads, head_dim), dtype=torch.uint8)
    q_sf = torch.exp2(torch.randint(-4, 5, (batch, next_n, heads, head_dim // 32)).float())
    q = Quantised(formats.pack_fp4_codes(q_codes), q_sf, True, False)
    weights, lens = torch.randn(batch * next_n, heads), _lengths(batch, next_n, max_ctx)
    got, want = torch.full((batch * next_n, max_ctx), SENTINEL), torch.full((batch * next_n, max_ctx), SENTINEL)
    paged_mqa_logits(q, kv, weights, lens, table, got, True)
    reference.paged_mqa_logits(q, kv, weights, lens, table, want, True)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3


# DeepGEMM-Ascend's FP4 form: packed E2M1 q with int16-packed scales selects its MX cache (2 * D/64 scale
# bytes per token: 34-byte rows at D = 64), in both page layouts (D = 64 fractal, D = 128 rows)
@pytest.mark.parametrize(("head_dim", "nz"), [(64, True), (128, False)])
def test_fp4_q_over_the_mx_cache_in_both_page_layouts(monkeypatch, head_dim, nz):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    batch, heads, block_kv, max_ctx = 2, 8, 64, 150
    pages = -(-max_ctx // block_kv)
    cache, dense = _mxfp8_cache(batch * pages + 1, block_kv, head_dim, nz, fp4=True)
    assert cache.size(-1) == head_dim // 2 + 2 * (head_dim // 64)
    table = torch.randperm(batch * pages + 1)[:batch * pages].view(batch, pages).to(torch.int32)
    q = formats.pack_fp4_codes(torch.randint(0, 16, (batch, 1, heads, head_dim), dtype=torch.uint8))
    q_exp = torch.randint(124, 130, (batch, 1, heads, head_dim // 32), dtype=torch.uint8)
    weights, lens = torch.randn(batch, heads), _lengths(batch, 1, max_ctx)
    meta = torch.zeros(deep_gemm.get_num_sms() + 1, 2, dtype=torch.int32)
    query = Quantised(q, torch.pow(2.0, q_exp.float() - 127), True, False)
    kv = PagedKV(cache, True, head_dim, True, nz)
    assert torch.equal(kv.dequantized(), dense), "the reference reads the cache as built"
    assert _dispatch.TABLE.serves("paged_mqa_logits", q.device, query, kv, weights, lens, table,
                                  torch.empty(batch, max_ctx), True) == "ascend"
    with DeviceOnly():
        got = deep_gemm.fp8_fp4_paged_mqa_logits(*_marked((q, q_exp.view(torch.int16)), cache, weights, lens, table,
                                                          meta), max_ctx, clean_logits=True, use_ascend_kv_layout=nz)
    want = torch.empty(batch, max_ctx)
    reference.paged_mqa_logits(query, kv, weights, lens, table, want, True)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3


@pytest.mark.parametrize("form", ["2d", "1d", "varlen"])
def test_public_op_on_ascend_reads_no_device_values(monkeypatch, form):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    batch, next_n, heads, head_dim, block_kv, max_ctx = 3, (1 if form == "varlen" else 2), 4, 32, 32, 200
    q, kv, weights, table = _inputs(batch, next_n, heads, head_dim, block_kv, max_ctx)
    lens = _lengths(batch, next_n, max_ctx)
    indices = None
    if form == "1d":
        lens = lens[:, -1].clamp_min(next_n).contiguous()
    elif form == "varlen":
        indices = torch.tensor([0, 0, 1], dtype=torch.int32)
    meta = torch.zeros(deep_gemm.get_num_sms() + 1, 2, dtype=torch.int32)
    with DeviceOnly():
        got = deep_gemm.fp8_paged_mqa_logits(*_marked(q.data, kv.cache, weights, lens, table, meta), max_ctx,
                                             clean_logits=True, indices=_marked(indices)[0])
    if form == "1d":  # upstream's 1-D form: row (b, t) sees positions [0, lens[b] - next_n + t]
        lens = lens[:, None] - (next_n - 1) + torch.arange(next_n, dtype=torch.int32)
    want = torch.empty(batch * next_n, max_ctx)
    reference.paged_mqa_logits(q, kv, weights, lens.view(batch, next_n), table, want, True)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3


def test_served_by_the_ascend_kernel(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    q, kv, weights, table = _inputs(1, 1, 4, 32, 32, 64)
    lens = torch.tensor([[10]], dtype=torch.int32)
    logits = torch.empty(1, 64)
    served = _dispatch.TABLE.serves("paged_mqa_logits", lens.device, q, kv, weights, lens, table, logits, True)
    assert served == "ascend"


@settings(max_examples=25, deadline=None)
@given(form=st.sampled_from(["1d", "2d", "varlen"]), rows=st.integers(0, 10), next_n=st.integers(1, 3),
       num_sms=st.integers(1, 9), seed=st.integers(0, 1000))
def test_metadata_on_ascend_matches_the_host_schedule(form, rows, next_n, num_sms, seed):
    gen = torch.Generator().manual_seed(seed)
    indices = None
    if form == "1d":
        lens = torch.randint(0, 2000, (rows,), dtype=torch.int32, generator=gen)
    elif form == "2d":
        lens = torch.randint(0, 2000, (rows, next_n), dtype=torch.int32, generator=gen)
    else:
        lens = torch.randint(0, 2000, (rows, 1), dtype=torch.int32, generator=gen)
        indices = torch.sort(torch.randint(0, 4, (rows,), generator=gen)).values.to(torch.int32)
    want = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, num_sms, indices=indices)
    with pytest.MonkeyPatch.context() as m:
        m.setenv("DG_BACKEND", "ascend")
        with DeviceOnly():
            got = deep_gemm.get_paged_mqa_logits_metadata(*_marked(lens), 64, num_sms, indices=_marked(indices)[0])
    assert torch.equal(got, want)


def test_lanes_read_gm_only_through_counted_loads():
    """The SIMT lanes' GM reads (page ids, scales in the pages, lengths) are asc_ldca / asc_ldcg, which the
    twin counts, so a plain __gm__ dereference would lower this count; the weights reach UB by MTE2 (the SIMD
    head sums read them there). 2 entries x 2 rows, every row 200 long (pages of 64, one KV tile each, no
    clean): per position (one lane) its page id and its scale; per row of the entry its length. Per tile
    each vector core loads the entry's 2 x 32 FP32 weights. Every logit is stored once."""
    from deepjit.tilelang_route import ascend_check
    batch, next_n, heads, ctx = 2, 2, 32, 200
    q, kv, weights, table = _inputs(batch, next_n, heads, 32, 64, ctx)
    lens = torch.full((batch, next_n), ctx, dtype=torch.int32)
    logits = torch.empty(batch * next_n, ctx)
    with ascend_check.recorded_launches() as launches:
        paged_mqa_logits(q, kv, weights, lens, table, logits, False)
    routes = ascend_check._summed_counters(launches)[0]["routes"]
    assert routes["simt_gm_load"] == batch * ctx * (2 * 4 + next_n * 4)
    assert routes["gm_to_ub"] == batch * 2 * next_n * heads * 4
    assert routes["simt_gm_store"] == batch * next_n * ctx * 4


def test_mxfp8_cache_inputs_are_checked_before_any_kernel():
    """use_ascend_kv_layout needs a scaled query; the MX cache takes DeepGEMM-Ascend's page sizes and rows."""
    q = torch.zeros(1, 1, 4, 64, dtype=torch.float8_e4m3fn)
    args = (torch.ones(1, 4), torch.ones(1, 1, dtype=torch.int32), torch.zeros(1, 2, dtype=torch.int32),
            torch.zeros(deep_gemm.get_num_sms() + 1, 2, dtype=torch.int32), 64)
    with pytest.raises(ValueError, match="use_ascend_kv_layout"):
        deep_gemm.fp8_fp4_paged_mqa_logits((q, None), torch.zeros(2, 64, 1, 66, dtype=torch.uint8), *args,
                                           use_ascend_kv_layout=True)
    sf = torch.full((1, 1, 4, 1), 0x7F7F, dtype=torch.int16)
    with pytest.raises(ValueError, match="block_kv"):
        deep_gemm.fp8_fp4_paged_mqa_logits((q, sf), torch.zeros(2, 32, 1, 66, dtype=torch.uint8), *args)
    with pytest.raises(ValueError, match=r"kv_cache.*\[num_blocks, block_kv, 1, 66\]"):
        deep_gemm.fp8_fp4_paged_mqa_logits((q, sf), torch.zeros(2, 64, 1, 68, dtype=torch.uint8), *args)
    fp4_q = torch.zeros(1, 1, 4, 32, dtype=torch.int8)  # packed E2M1, D = 64: the MX cache's rows are 32 + 2
    with pytest.raises(ValueError, match=r"kv_cache.*\[num_blocks, block_kv, 1, 34\]"):
        deep_gemm.fp8_fp4_paged_mqa_logits((fp4_q, sf), torch.zeros(2, 64, 1, 36, dtype=torch.uint8), *args)
