"""flash_mla's Ascend sparse kernels (twin) agree with the reference and the exact answer when the top logit,
2^25, is tied between two tokens: the mean of their values (see tests/flash_mla/tied_logits.py)."""
import torch

from flash_mla import reference
from flash_mla.ascend import sparse_attn

from .. import tied_logits as T


def _assert_mean(out: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(out.float(), want.expand_as(out), atol=2e-2, rtol=2e-2)


def test_prefill_tied_top_logit():
    q, kv, idx, want = T.prefill(2, 16)
    got = sparse_attn.sparse_prefill(q, kv, idx, T.SCALE, 512, None, None)
    ref = reference.sparse_prefill(q, kv, idx, T.SCALE, 512, None, None)
    for out, max_logits, lse in (got, ref):
        _assert_mean(out, want)
        assert bool((max_logits == 2.0 ** 25).all()) and bool((lse == 2.0 ** 25).all())


def test_decode_tied_top_logit():
    q, scopes, want = T.decode(2, 16)
    got = sparse_attn.sparse_decode(q, scopes, T.SCALE, 512, None, False)
    ref = reference.sparse_decode(q, scopes, T.SCALE, 512, None)
    for out, lse in (got, ref):
        _assert_mean(out, want)
        assert bool((lse == 2.0 ** 25).all())
