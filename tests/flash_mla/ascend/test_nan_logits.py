"""A NaN logit on flash_mla's Ascend sparse kernels (twin) gives what the reference gives: NaN out, lse and
max_logits for its row, not an empty row (out 0, lse +inf). The kernels' maxima select NaN explicitly (a
plain float max may drop it: each test runs with the twin's max propagating and dropping NaN); other rows are
untouched. NaN / Inf in q and in the cache through the public ops (a
NaN cache element read as 0 in decode included) run on the host and Ascend kernels in tests/flash_mla/test_nan_propagation.py."""

import pytest

from flash_mla import reference
from flash_mla.ascend import sparse_attn

from ..compare import DECODE_LSE, DECODE_OUT, PREFILL_OUT, PREFILL_STAT, assert_close
from ..test_sparse_decode import _case as decode_case
from ..test_sparse_prefill import _case as prefill_case
from .test_sparse_decode import FP8


@pytest.fixture(autouse=True, params=["propagates", "drops"])
def max_nan_model(request, monkeypatch):
    """AscendC's docs leave the NaN result of the register max and reduce-max open: every test runs with the
    twin's max propagating NaN and again dropping it (DJ_TWIN_MAX_DROPS_NAN), so the kernels' explicit NaN
    selects are what keeps a NaN row NaN."""
    monkeypatch.setenv("DJ_TWIN_MAX_DROPS_NAN", "1" if request.param == "drops" else "0")


def test_prefill_nan_logit_gives_a_nan_row():
    q, kv, idx, _ = prefill_case(2, 200, 16, 512, 128, seed=7)
    q[1, 5, 9] = float("nan")     # every logit of (row 1, head 5) is NaN
    kv[int(idx[0, 0, 70]), 0, 3] = float("nan")  # one token of row 0 (step 2 of 2): NaN for every head
    got = sparse_attn.sparse_prefill(q, kv, idx, 0.5, 512, None, None)
    ref = reference.sparse_prefill(q, kv, idx, 0.5, 512, None, None)
    for name, a, r, tol in zip(("out", "max_logits", "lse"), got, ref, (PREFILL_OUT, PREFILL_STAT, PREFILL_STAT),
                               strict=True):
        assert_close(a, r, tol, name)
    out, max_logits, lse = got
    assert bool(out[1, 5].isnan().all()) and lse[1, 5].isnan() and max_logits[1, 5].isnan()
    assert bool(lse[0].isnan().all())  # the NaN token is read by row 0 (and maybe row 1, as in the reference)


def test_decode_nan_logit_gives_a_nan_row():
    q, scopes = decode_case(*FP8, 2, 1, 16, 64, 16, 8, seed=4, ragged=False)
    q[1, 0, 3, 11] = float("nan")
    out, lse = sparse_attn.sparse_decode(q, scopes, 512 ** -0.5, 512, None, False)
    ref_out, ref_lse = reference.sparse_decode(q, scopes, 512 ** -0.5, 512, None)
    assert_close(out, ref_out, DECODE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")
    assert bool(out[1, 0, 3].isnan().all()) and lse[1, 3, 0].isnan()
    assert not out[0].isnan().any()


def test_prefill_inf_logit_gives_an_inf_lse():
    """A +inf logit: the row's reference max is +inf and its sum NaN (inf - inf), and lse is +inf as the
    reference has it (m = +inf selects it), not NaN."""
    q, kv, idx, _ = prefill_case(2, 200, 16, 512, 128, seed=8)
    q[1, 5] = 1e20  # (row 1, head 5) . a token whose elements are all large: a +inf FP32 logit
    kv[int(idx[1, 0, 3]), 0] = 1e20
    got = sparse_attn.sparse_prefill(q, kv, idx, 0.5, 512, None, None)
    ref = reference.sparse_prefill(q, kv, idx, 0.5, 512, None, None)
    assert ref[2][1, 5] == float("inf")
    for name, a, r, tol in zip(("out", "max_logits", "lse"), got, ref, (PREFILL_OUT, PREFILL_STAT, PREFILL_STAT),
                               strict=True):
        assert_close(a, r, tol, name)
