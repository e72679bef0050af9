"""flash_mla's Ascend sparse prefill (flash_mla/ascend/sparse_mla.asc over BF16 kv rows) on deepjit's
Ascend twin against the FP32 reference at upstream's prefill tolerances: d_qk 512 and 576, topk
64..128, partial last steps, strided heads, out-of-range and negative ids, topk_length, rows without a
valid token and an attention sink with +-inf entries, 16 heads through the entry point; the running max across
steps; several head groups per block with one- and two-step items (each item its own sink). The public op (64 and 128 heads, both d_qk, no query row) runs on the host and Ascend kernels in
tests/flash_mla/test_sparse_prefill.py."""
import math

import pytest
import torch

import flash_mla
from flash_mla import reference
from flash_mla.ascend import sparse_attn
from tests.testkit.npu import DEVICE

from ..compare import PREFILL_OUT, PREFILL_STAT, assert_close
from ..test_sparse_prefill import _case


def _sink(h_q: int, seed: int) -> torch.Tensor:
    sink = torch.randn(h_q, generator=torch.Generator().manual_seed(seed)) + 4.0  # near lse: the sink matters
    sink[:3] = torch.tensor([float("inf"), float("-inf"), 0.0])
    return sink


def _compare(got, ref):
    for name, a, r, tol in zip(("out", "max_logits", "lse"), got, ref, (PREFILL_OUT, PREFILL_STAT, PREFILL_STAT),
                               strict=True):
        assert a.shape == r.shape and a.is_contiguous(), name
        assert_close(a, r, tol, name)


@pytest.mark.parametrize("s_q,s_kv,d_qk,topk,sink,lengths", [
    (1, 64, 512, 64, False, False),
    (4, 95, 512, 128, True, True),      # topk > s_kv: padded with out-of-range ids
    (3, 300, 512, 100, True, False),    # a partial last step
    (5, 200, 512, 70, False, True),
    (3, 150, 576, 100, True, True),     # d_qk 576: a 64-deep last QK chunk, a partial last step
])
def test_matches_reference(s_q, s_kv, d_qk, topk, sink, lengths):
    q, kv, idx, topk_length = _case(s_q, s_kv, 16, d_qk, topk, seed=s_q + topk, lengths=lengths,
                                    empty_rows=s_q > 2)
    attn_sink = _sink(16, topk) if sink else None
    got = sparse_attn.sparse_prefill(q, kv, idx, 0.5, 512, attn_sink, topk_length)
    _compare(got, reference.sparse_prefill(q, kv, idx, 0.5, 512, attn_sink, topk_length))
    out, max_logits, lse = got
    if s_q > 2:  # row 0 has no valid id
        assert out[0].abs().max() == 0 and bool((lse[0] == math.inf).all()) and bool((max_logits[0] == -math.inf).all())


@pytest.mark.parametrize("rising,shift,skip", [(True, 10.0, 8), (False, 10.0, 8), (True, 2.0, 0), (False, 2.0, 0)])
def test_running_max_moves_across_steps(monkeypatch, rising, shift, skip):
    # every head of q shares a direction u; token t carries c * u with c changing per 64-token step so
    # the logits shift by `shift` per step: past the rescale-skip margin (10 > 8: the reference max moves,
    # the earlier steps' weight is small), or, with the margin 0, by 2 per step where every rescale of
    # the accumulator weighs in the result; falling, the first step's max stays. Row 0 reads the steps in
    # order, row 1 shuffled.
    monkeypatch.setattr(sparse_attn, "RESCALE_SKIP", skip)
    g = torch.Generator().manual_seed(3)
    s_q, s_kv, topk = 2, 256, 256
    u = torch.full((512,), 512 ** -0.5)
    q = (torch.randn(s_q, 16, 512, generator=g) / 10 + u).bfloat16()
    step = torch.arange(s_kv) // 64
    c = 2 * shift * (step if rising else 3 - step)   # logit shift = c * |u|^2 * sm_scale(0.5)
    kv = (torch.randn(s_kv, 512, generator=g) / 10 + c.view(-1, 1) * u).bfloat16().view(s_kv, 1, 512)
    idx = torch.stack([torch.arange(topk), torch.randperm(topk, generator=g)]).view(s_q, 1, topk).to(torch.int32)
    got = sparse_attn.sparse_prefill(q, kv, idx, 0.5, 512, None, None)
    _compare(got, reference.sparse_prefill(q, kv, idx, 0.5, 512, None, None))


def test_items_per_block_with_one_core_rescaling():
    # 70 rows on the twin's 32 cube cores: blocks 0..5 run three work items as one stream of steps (two Q
    # buffers, two row-statistics sets, out stored while the next item runs); heads 0..7 (the first vector
    # core's rows) see logits that rise by 10 a step, so O leaves L0C at their rescale while the second
    # core's factors stay 1; odd rows read the steps shuffled, and a sink applies per head.
    g = torch.Generator().manual_seed(5)
    s_q, s_kv, topk, h_q = 70, 256, 256, 16
    assert s_q > sparse_attn.LIB.num_cube_cores(torch.device("cpu")) * 2
    u = torch.full((512,), 512 ** -0.5)
    q = torch.randn(s_q, h_q, 512, generator=g) / 10
    q[:, :8] += u
    c = 20.0 * (torch.arange(s_kv) // 64)  # logit shift of the first 8 heads = c * |u|^2 * sm_scale(0.5)
    kv = (torch.randn(s_kv, 512, generator=g) / 10 + c.view(-1, 1) * u).bfloat16().view(s_kv, 1, 512)
    q = q.bfloat16()
    rows = [torch.arange(topk) if r % 2 == 0 else torch.randperm(topk, generator=g) for r in range(s_q)]
    idx = torch.stack(rows).view(s_q, 1, topk).to(torch.int32)
    attn_sink = _sink(h_q, 5)
    got = sparse_attn.sparse_prefill(q, kv, idx, 0.5, 512, attn_sink, None)
    _compare(got, reference.sparse_prefill(q, kv, idx, 0.5, 512, attn_sink, None))


@pytest.mark.parametrize("topk", [64, 128])
def test_sink_per_item_with_short_items(monkeypatch, topk):
    # 16 heads per block and a grid of 2: 48 heads are three head groups, so a block's consecutive items
    # (one or two steps each) belong to different groups and need different sinks; the vector cores
    # issue loads up to three steps ahead, i.e. up to three items ahead here.
    monkeypatch.setattr(sparse_attn, "HEADS_PER_BLOCK", 16)
    monkeypatch.setattr(sparse_attn.LIB, "num_cube_cores", lambda _dev: 2)
    h_q = 48
    q, kv, idx, _ = _case(4, 150, h_q, 512, topk, seed=topk)
    attn_sink = _sink(h_q, topk)
    got = sparse_attn.sparse_prefill(q, kv, idx, 0.5, 512, attn_sink, None)
    _compare(got, reference.sparse_prefill(q, kv, idx, 0.5, 512, attn_sink, None))


def test_no_index_per_row_is_a_value_error_before_launch():
    # with no step the cube core would wait for a K tile forever
    q, kv, idx, _ = _case(2, 64, 16, 512, 64, seed=2)
    with pytest.raises(ValueError, match="topk >= 1"):
        sparse_attn.sparse_prefill(q, kv, idx[..., :0], 0.5, 512, None, None)


@pytest.mark.npu
def test_on_the_npu():
    q, kv, idx, topk_length = _case(4, 300, 64, 512, 128, seed=9, lengths=True)
    sink = _sink(64, 9)
    dev = torch.device(DEVICE)
    got = flash_mla.flash_mla_sparse_fwd(q.to(dev), kv.to(dev), idx.to(dev), 0.3, 512, sink.to(dev),
                                         topk_length.to(dev))
    _compare([t.cpu() for t in got], reference.sparse_prefill(q, kv, idx, 0.3, 512, sink, topk_length))


def test_an_invalid_tokens_row_never_reads_the_slots_last_record(monkeypatch):
    """BF16 rows are pushed to L1 from the gather slots themselves: an invalid token's slot still holds the
    record an earlier item loaded there, which must not reach P . V (0 x NaN). One block runs both rows: row
    0's token 5 is an all-NaN kv row (its outputs NaN, as the reference's), row 1's token 5 is invalid (-1)
    and its outputs stay finite."""
    monkeypatch.setattr(sparse_attn.LIB, "num_cube_cores", lambda device: 1)
    g = torch.Generator().manual_seed(11)
    s_q, s_kv, topk, h_q = 2, 128, 64, 16
    q = (torch.randn(s_q, h_q, 512, generator=g) / 10).bfloat16()
    kv = (torch.randn(s_kv, 1, 512, generator=g) / 10).bfloat16()
    kv[100] = float("nan")
    idx = torch.stack([torch.arange(topk), torch.arange(topk) + 1]).to(torch.int32)
    idx[0, 5], idx[1, 5] = 100, -1
    idx = idx.view(s_q, 1, topk)
    got = sparse_attn.sparse_prefill(q, kv, idx, 0.5, 512, None, None)
    _compare(got, reference.sparse_prefill(q, kv, idx, 0.5, 512, None, None))
    assert bool(got[0][0].isnan().all()) and bool(got[0][1].isfinite().all())


def test_a_row_of_minus_inf_logits_is_empty_even_over_infinite_values():
    """Row 1's tokens are all -inf kv rows and its q positive: every logit is -inf, so the row is empty (out 0,
    lse +inf, as the reference's) although its P . V accumulates 0 x -inf = NaN."""
    g = torch.Generator().manual_seed(12)
    s_q, s_kv, topk, h_q = 2, 128, 64, 16
    q = (torch.randn(s_q, h_q, 512, generator=g) / 10).bfloat16()
    q[1] = 0.5
    kv = (torch.randn(s_kv, 1, 512, generator=g) / 10).bfloat16()
    kv[64:] = float("-inf")
    idx = torch.stack([torch.arange(topk), torch.arange(topk) + 64]).to(torch.int32).view(s_q, 1, topk)
    got = sparse_attn.sparse_prefill(q, kv, idx, 0.5, 512, None, None)
    ref = reference.sparse_prefill(q, kv, idx, 0.5, 512, None, None)
    _compare(got, ref)
    assert bool((got[0][1] == 0).all()) and bool((got[2][1] == math.inf).all())
