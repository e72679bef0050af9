"""flash_mla_sparse_fwd: the host kernels and the Ascend kernels (on deepjit's twin) against the FP32 reference; the
Ascend kernel's own cases (head blocks, the running max across steps, its entry point) are in
ascend/test_sparse_prefill.py."""
import math

import pytest
import torch

import flash_mla
from flash_mla import reference

from .compare import PREFILL_OUT, PREFILL_STAT, assert_close

INVALID = [-2 ** 31, -123456, -1, 114514, 2 ** 31 - 1]


def _case(s_q, s_kv, h_q, d_qk, topk, seed, lengths=False, empty_rows=False):
    g = torch.Generator().manual_seed(seed)
    c = (torch.rand(2, generator=g) - 0.5) / 10
    q = (torch.randn(s_q, 2 * h_q, d_qk, generator=g) / 10 + c[0]).clamp(-10, 10).bfloat16()[:, ::2]  # strided heads
    kv = (torch.randn(s_kv, 1, d_qk, generator=g) / 10 + c[1]).clamp(-10, 10).bfloat16()
    rows = [torch.randperm(s_kv, generator=g)[:topk] for _ in range(s_q)]
    idx = torch.stack([torch.cat([r, torch.tensor(INVALID)[torch.randint(0, 5, (topk - r.numel(),), generator=g)]])
                       for r in rows])
    idx = idx.view(s_q, 1, topk).to(torch.int32)
    if empty_rows:
        idx[0] = -1
    topk_length = torch.randint(0, topk + 1, (s_q,), generator=g, dtype=torch.int32) if lengths else None
    return q, kv, idx, topk_length


@pytest.mark.parametrize("s_q,s_kv,h_q,d_qk,topk,sink,lengths", [
    (5, 256, 128, 576, 256, False, False),
    (7, 95, 64, 512, 128, True, True),       # topk > s_kv: padded with out-of-range ids
    (3, 600, 128, 512, 200, True, False),
    (1, 300, 64, 576, 130, False, True),     # one row: split-KV across threads
])
@pytest.mark.backends("host", "ascend", why="compares with the reference itself")
def test_matches_reference(backend, s_q, s_kv, h_q, d_qk, topk, sink, lengths):
    q, kv, idx, topk_length = _case(s_q, s_kv, h_q, d_qk, topk, seed=s_q * 7 + h_q, lengths=lengths,
                                    empty_rows=s_q > 2)
    attn_sink = None
    if sink:
        attn_sink = torch.randn(h_q)
        attn_sink[:3] = torch.tensor([float("inf"), float("-inf"), 0.0])
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, 0.5, 512, attn_sink, topk_length)
    ref = reference.sparse_prefill(q, kv, idx, 0.5, 512, attn_sink, topk_length)
    assert out.shape == (s_q, h_q, 512) and max_logits.shape == lse.shape == (s_q, h_q)
    assert out.is_contiguous() and lse.is_contiguous() and max_logits.is_contiguous()
    assert_close(out, ref[0], PREFILL_OUT, "out")
    assert_close(max_logits, ref[1], PREFILL_STAT, "max_logits")
    assert_close(lse, ref[2], PREFILL_STAT, "lse")
    if s_q > 2:
        assert out[0].abs().max() == 0 and bool((lse[0] == math.inf).all()) and bool((max_logits[0] == -math.inf).all())
    assert backend != "ascend" or backend.served == ["sparse_prefill"]


def test_no_query_row_gives_empty_outputs(backend):
    q, kv, idx, _ = _case(2, 64, 64, 512, 32, seed=2)
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q[:0], kv, idx[:0], 0.5)
    assert out.shape == (0, 64, 512) and out.dtype == torch.bfloat16
    assert max_logits.shape == lse.shape == (0, 64) and max_logits.dtype == lse.dtype == torch.float32
    assert backend != "ascend" or backend.served == ["sparse_prefill"]


def test_lse_is_natural_log():
    q, kv, idx, _ = _case(2, 128, 64, 512, 64, seed=2)
    _, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, 0.5)
    logits = (q.float() @ kv[idx[:, 0].long(), 0].float().transpose(1, 2)) * 0.5
    assert_close(lse, torch.logsumexp(logits, -1), PREFILL_STAT, "lse")
    assert_close(max_logits, logits.amax(-1), PREFILL_STAT, "max_logits")
