"""NaN and +-Inf in q reach the outputs as in the reference (and upstream's GPU kernels, whose max is
IEEE): a NaN logit gives NaN out, lse and max_logits; a +inf one NaN out and +inf lse/max; a row of
-inf logits is empty. Hypothesis plants the values at random positions; the comparison is
NaN-for-NaN and Inf-for-Inf, finite elements within upstream's tolerances. On the host kernels and the Ascend
kernels (deepjit's twin); the ``backend`` fixture holds for every example (hence the health check off)."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flash_mla
from flash_mla import reference
from flash_mla.kv_cache import KVCacheFormat

from .compare import DECODE_LSE, DECODE_OUT, PREFILL_OUT, PREFILL_STAT, assert_close
from .test_sparse_decode import _case as decode_case
from .test_sparse_decode import _run as decode_run
from .test_sparse_prefill import _case as prefill_case

SPECIALS = st.sampled_from([float("nan"), float("inf"), float("-inf")])
FIXTURE_OK = [HealthCheck.function_scoped_fixture]  # backend only sets the path: the same for every example
HOST_ONLY = ("compares with the reference itself; hypothesis on the twin costs about 0.5 s an example, so the "
             "Ascend sparse kernel's specials are the deterministic cases below and ascend/test_nan_logits.py")


def _plant(t: torch.Tensor, positions, values) -> torch.Tensor:
    flat = t.clone().view(-1)
    for p, v in zip(positions, values, strict=True):
        flat[p % flat.numel()] = v
    return flat.view(t.shape)


@settings(max_examples=12, deadline=None, suppress_health_check=FIXTURE_OK)
@given(positions=st.lists(st.integers(0, 2 ** 31), min_size=1, max_size=4), data=st.data())
@pytest.mark.parametrize("s_q", [3, 1])  # 1 row: split-KV, the partial states merge
@pytest.mark.backends("host", why=HOST_ONLY)
def test_sparse_prefill_specials_in_q(backend, s_q, positions, data):
    values = data.draw(st.lists(SPECIALS, min_size=len(positions), max_size=len(positions)))
    q, kv, idx, topk_length = prefill_case(s_q, 300, 64, 512, 130, seed=s_q, lengths=True)
    q = _plant(q, positions, values)
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, 0.5, 512, None, topk_length)
    ref = reference.sparse_prefill(q, kv, idx, 0.5, 512, None, topk_length)
    assert_close(out, ref[0], PREFILL_OUT, "out")
    assert_close(max_logits, ref[1], PREFILL_STAT, "max_logits")
    assert_close(lse, ref[2], PREFILL_STAT, "lse")


def test_sparse_prefill_nan_query_row_is_nan_not_empty(backend):
    q, kv, idx, _ = prefill_case(2, 128, 64, 512, 64, seed=3)
    q[1, 5, 7] = float("nan")
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, 0.5)
    assert bool(out[1, 5].isnan().all()) and lse[1, 5].isnan() and max_logits[1, 5].isnan()
    assert not out[0].isnan().any() and not lse[0].isnan().any()
    assert backend != "ascend" or backend.served == ["sparse_prefill"]


def test_sparse_prefill_inf_logit_gives_inf_lse(backend):
    """A +inf logit: NaN out, lse = max_logits = +inf (not NaN from inf - inf); other rows untouched."""
    q, kv, idx, _ = prefill_case(2, 128, 64, 512, 64, seed=3)
    kv[:, :, 7] = kv[:, :, 7].abs() + 0.125      # every key positive at dim 7: q's +inf there gives +inf logits
    q[1, 5, 7] = float("inf")
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, 0.5)
    assert bool(out[1, 5].isnan().all()) and lse[1, 5] == float("inf") and max_logits[1, 5] == float("inf")
    assert bool(lse[0].isfinite().all()) and bool(lse[1, :5].isfinite().all())
    assert backend != "ascend" or backend.served == ["sparse_prefill"]


def test_dense_decode_inf_logit_gives_inf_lse(backend):
    """The dense kernels likewise: a +inf logit gives NaN out and lse +inf for its row only."""
    g = torch.Generator().manual_seed(1)
    q = (torch.randn(2, 1, 16, 576, generator=g) / 10).bfloat16()
    q[0, 0, 3, 0] = float("inf")
    k_cache = (torch.randn(4, 16, 1, 576, generator=g) / 10).bfloat16()
    k_cache[..., 0] = k_cache[..., 0].abs() + 0.125
    table, lens = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32), torch.tensor([32, 21], dtype=torch.int32)
    out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, table, lens, 512, flash_mla.get_mla_metadata()[0],
                                                is_fp8_kvcache=False)
    assert bool(out[0, 0, 3].isnan().all()) and lse[0, 3, 0] == float("inf")
    assert not out[1].isnan().any() and bool(lse[1].isfinite().all()) and bool(lse[0, :3].isfinite().all())
    assert backend != "ascend" or backend.served == ["dense_decode"]


@settings(max_examples=10, deadline=None, suppress_health_check=FIXTURE_OK)
@given(positions=st.lists(st.integers(0, 2 ** 31), min_size=1, max_size=4), data=st.data())
@pytest.mark.backends("host", why=HOST_ONLY)
def test_sparse_decode_specials_in_q(backend, positions, data):
    values = data.draw(st.lists(SPECIALS, min_size=len(positions), max_size=len(positions)))
    fmt = KVCacheFormat.V32_FP8
    q, scopes = decode_case(fmt, None, 2, 1, 64, 100, 64, 8, seed=5, ragged=True)
    q = _plant(q, positions, values)
    scale = fmt.d_qk ** -0.5
    out, lse = decode_run(q, scopes, None, scale)
    ref_out, ref_lse = reference.sparse_decode(q, scopes, scale, 512, None)
    assert_close(out, ref_out, DECODE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")


def _upstream_dense_decode(q, k_cache, table, lens, d_v, scale):
    """Upstream's dense reference (tests/test_flash_mla_dense_decoding.py), restated: NaN in the gathered cache
    becomes 0, +-inf stays; softmax; a row with nothing to attend gives out 0, lse +inf."""
    b, s_q, h_q, d = q.shape
    out, lse = torch.zeros(b, s_q, h_q, d_v), torch.zeros(b, h_q, s_q)
    for i in range(b):
        n = int(lens[i])
        kv = k_cache[table[i].long()].reshape(-1, d)[:n].float()
        kv[kv != kv] = 0.0
        w = (q[i].float().transpose(0, 1) @ kv.T) * scale          # [h_q, s_q, n]
        lse[i] = w.logsumexp(-1)
        out[i] = (torch.softmax(w, -1) @ kv[:, :d_v]).transpose(0, 1)
    return out, lse


@settings(max_examples=12, deadline=None, suppress_health_check=FIXTURE_OK)
@given(positions=st.lists(st.integers(0, 2 ** 31), min_size=1, max_size=3), data=st.data())
@pytest.mark.backends("host", "ascend", why="compares with the reference itself")
def test_dense_decode_specials_in_the_cache(backend, positions, data):
    """NaN in a read cache element counts as 0 (upstream's reference), +-inf reaches the logits and values."""
    values = data.draw(st.lists(SPECIALS, min_size=len(positions), max_size=len(positions)))
    g = torch.Generator().manual_seed(len(positions))
    q = torch.randn(2, 1, 16, 576, generator=g).clamp(-1, 1).bfloat16()
    q[:, :, :4, :8] = 0.0                             # 0 * inf: NaN logits on some heads
    k_cache = _plant((torch.randn(4, 16, 1, 576, generator=g) / 10).bfloat16(), positions, values)
    table = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    lens = torch.tensor([32, 21], dtype=torch.int32)
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, table, lens, 512, meta, is_fp8_kvcache=False)
    ref_out, ref_lse = reference.dense_decode(q, k_cache, table, lens, 512, 576 ** -0.5, False)
    up_out, up_lse = _upstream_dense_decode(q, k_cache, table, lens, 512, 576 ** -0.5)
    assert_close(ref_out, up_out.bfloat16(), DECODE_OUT, "reference out")
    assert_close(ref_lse, up_lse, DECODE_LSE, "reference lse")
    assert_close(out, ref_out, DECODE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")


@pytest.mark.backends("host", "ascend", why="compares with the reference itself")
def test_sparse_decode_reads_a_nan_cache_element_as_zero(backend):
    """Upstream's decode reference zeroes NaN in the gathered tokens (its prefill one does not): a NaN FP8 code
    in a read token gives what a 0 code gives, on the kernels as in the reference."""
    from flash_mla._operands import _flat_bytes
    fmt = KVCacheFormat.V41_FP8
    q, scopes = decode_case(fmt, "interleaved", 2, 1, 64, 16, 16, 4, seed=4, ragged=False)
    scale = fmt.d_qk ** -0.5
    cache = scopes[0].cache
    slot = int(scopes[0].indices[0, 0, 0])
    byte = (slot // cache.shape[1]) * cache.stride(0) + (slot % cache.shape[1]) * fmt.bytes_per_token + 5
    _flat_bytes(cache)[byte] = 0x00
    zero_out, zero_lse = reference.sparse_decode(q, scopes, scale, 512, None)
    _flat_bytes(cache)[byte] = 0x7F                   # E4M3 NaN
    ref_out, ref_lse = reference.sparse_decode(q, scopes, scale, 512, None)
    assert torch.equal(ref_out, zero_out) and torch.equal(ref_lse, zero_lse)
    out, lse = decode_run(q, scopes, None, scale)
    assert_close(out, ref_out, DECODE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")
