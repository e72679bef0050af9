"""MQA logits (both forms) keep NaN as the reference does: a NaN KV scale or weight makes the logits
it reaches NaN (torch's relu keeps NaN; a max(x, 0) that drops it gave 0). Hypothesis plants NaN at
random float inputs; host and reference must agree NaN for NaN."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deep_gemm
from deep_gemm.testing.generators import randn

from .test_mqa_logits import _paged_cache, _quant_kv, _quant_q, _ranges


def _both(monkeypatch, call):
    out = {}
    for name in ("host", "reference"):
        monkeypatch.setenv("DG_BACKEND", name)
        out[name] = call()
    return out["host"], out["reference"]


def _same_nan(got, want):
    assert torch.equal(got.isnan(), want.isnan()), (got.isnan() != want.isnan()).nonzero()[:5].tolist()
    finite = ~want.isnan() & want.isfinite()
    assert torch.allclose(got[finite], want[finite], rtol=1e-4, atol=1e-3)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scale_pos=st.lists(st.integers(0, 63), max_size=3), weight_pos=st.lists(st.integers(0, 63), max_size=2))
def test_mqa_logits_nan_scales_and_weights(monkeypatch, scale_pos, weight_pos):
    torch.manual_seed(0)
    s, s_kv, h, d = 4, 64, 16, 64
    (qq, _), ((kv, sf), _) = _quant_q(randn(s, h, d), False), _quant_kv(randn(s_kv, d), False)
    weights = torch.randn(s, h)
    sf = sf.clone()
    sf[scale_pos] = float("nan")
    weights.view(-1)[weight_pos] = float("nan")
    ks, ke = _ranges(s, s_kv, False)
    got, want = _both(monkeypatch, lambda: deep_gemm.fp8_fp4_mqa_logits(qq, (kv, sf), weights, ks, ke))
    _same_nan(got, want)
    if scale_pos:
        assert got.isnan().any() or not bool(((ks <= scale_pos[0]) & (scale_pos[0] < ke)).any())


@pytest.mark.parametrize("token", [0, 37])
def test_paged_mqa_logits_nan_kv_scale(monkeypatch, token):
    torch.manual_seed(0)
    batch, heads, d, block_kv, max_ctx = 2, 16, 128, 32, 64
    pages = max_ctx // block_kv
    order = list(range(batch * pages))
    kv = randn(batch * max_ctx, d)
    cache, _ = _paged_cache(kv, block_kv, False, batch * pages, order)
    scales = cache.view(batch * pages, -1)[:, block_kv * d:].view(torch.float32)  # [page, token in page]
    scales[token // block_kv, token % block_kv] = float("nan")  # request 0's token `token`
    context_lens = torch.tensor([[50], [64]], dtype=torch.int32)
    table = torch.arange(batch * pages, dtype=torch.int32).view(batch, pages)
    (qq, _) = _quant_q(randn(batch, heads, d), False)
    qq = (qq[0].view(batch, 1, heads, -1), None)
    weights = torch.randn(batch, heads)
    meta = deep_gemm.get_paged_mqa_logits_metadata(context_lens, block_kv, deep_gemm.get_num_sms())
    got, want = _both(monkeypatch, lambda: deep_gemm.fp8_fp4_paged_mqa_logits(qq, cache, weights, context_lens, table,
                                                                             meta, max_ctx, clean_logits=True))
    assert got[0, token].isnan() and want[0, token].isnan()
    _same_nan(got, want)
