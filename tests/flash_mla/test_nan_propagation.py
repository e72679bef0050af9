"""NaN and +-Inf in q reach the outputs as in the reference (and upstream's GPU kernels, whose max is
IEEE): a NaN logit gives NaN out, lse and max_logits; a +inf one NaN out and +inf lse/max; a row of
-inf logits is empty. Hypothesis plants the values at random positions; the comparison is
NaN-for-NaN and Inf-for-Inf, finite elements within upstream's tolerances."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import flash_mla
from flash_mla import reference
from flash_mla.kv_cache import KVCacheFormat

from .compare import DECODE_LSE, DECODE_OUT, PREFILL_OUT, PREFILL_STAT, assert_close
from .test_sparse_decode import _case as decode_case
from .test_sparse_decode import _run as decode_run
from .test_sparse_prefill import _case as prefill_case

SPECIALS = st.sampled_from([float("nan"), float("inf"), float("-inf")])


def _plant(t: torch.Tensor, positions, values) -> torch.Tensor:
    flat = t.clone().view(-1)
    for p, v in zip(positions, values, strict=True):
        flat[p % flat.numel()] = v
    return flat.view(t.shape)


@settings(max_examples=12, deadline=None)
@given(positions=st.lists(st.integers(0, 2 ** 31), min_size=1, max_size=4), data=st.data())
@pytest.mark.parametrize("s_q", [3, 1])  # 1 row: split-KV, the partial states merge
def test_sparse_prefill_specials_in_q(s_q, positions, data):
    values = data.draw(st.lists(SPECIALS, min_size=len(positions), max_size=len(positions)))
    q, kv, idx, topk_length = prefill_case(s_q, 300, 64, 512, 130, seed=s_q, lengths=True)
    q = _plant(q, positions, values)
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, 0.5, 512, None, topk_length)
    ref = reference.sparse_prefill(q, kv, idx, 0.5, 512, None, topk_length)
    assert_close(out, ref[0], PREFILL_OUT, "out")
    assert_close(max_logits, ref[1], PREFILL_STAT, "max_logits")
    assert_close(lse, ref[2], PREFILL_STAT, "lse")


def test_sparse_prefill_nan_query_row_is_nan_not_empty():
    q, kv, idx, _ = prefill_case(2, 128, 64, 512, 64, seed=3)
    q[1, 5, 7] = float("nan")
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, 0.5)
    assert bool(out[1, 5].isnan().all()) and lse[1, 5].isnan() and max_logits[1, 5].isnan()
    assert not out[0].isnan().any() and not lse[0].isnan().any()


@settings(max_examples=10, deadline=None)
@given(positions=st.lists(st.integers(0, 2 ** 31), min_size=1, max_size=4), data=st.data())
def test_sparse_decode_specials_in_q(positions, data):
    values = data.draw(st.lists(SPECIALS, min_size=len(positions), max_size=len(positions)))
    fmt = KVCacheFormat.V32_FP8
    q, scopes = decode_case(fmt, None, 2, 1, 64, 100, 64, 8, seed=5, ragged=True)
    q = _plant(q, positions, values)
    scale = fmt.d_qk ** -0.5
    out, lse = decode_run(q, scopes, None, scale)
    ref_out, ref_lse = reference.sparse_decode(q, scopes, scale, 512, None)
    assert_close(out, ref_out, DECODE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")
