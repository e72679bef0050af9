"""flash_mla's Ascend sparse decode kernel (flash_mla/ascend/sparse_mla.asc) on deepjit's Ascend twin
(CPU tensors) against the FP32 reference at upstream's decode tolerances: every cache format (V3.2 at
d_qk 576, MODEL1, V4.1 FP8 main / FP4 or FP8 extra caches in both placements), attention sink (with
+-inf entries), topk_length, invalid (-1) ids; every slot no row reads is NaN-poisoned. Most cases
call the entry point with 16 heads (the kernel's smallest head block, one compile per d_qk); the
table cases go through flash_mla_with_kvcache with FMLA_BACKEND=ascend at 64 / 128 heads (64 per
cube block) and assert the Ascend kernel served each format. Every format through the public op at 64 and 128
heads, and rows with no valid token, run on the host and Ascend kernels in tests/flash_mla/test_sparse_decode.py."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deepjit.library import AscendKernelHandle
from flash_mla import _dispatch, reference
from flash_mla.ascend import sparse_attn
from flash_mla.kv_cache import KVCacheFormat
from flash_mla.reference.sparse import KVScope
from tests.testkit.npu import DEVICE

from ..compare import DECODE_LSE, DECODE_OUT, assert_close
from ..test_sparse_decode import _case, _run

F = KVCacheFormat
FP8 = (F.V41_FP8, "interleaved")


def _sink(h_q: int, seed: int) -> torch.Tensor:
    sink = torch.randn(h_q, generator=torch.Generator().manual_seed(seed)) + 4.0  # near lse: the sink matters
    sink[:2] = torch.tensor([float("inf"), float("-inf")])
    return sink


def _check(q, scopes, sink, scale=512 ** -0.5):
    out, lse = sparse_attn.sparse_decode(q, scopes, scale, 512, sink, False)
    ref_out, ref_lse = reference.sparse_decode(q, scopes, scale, 512, sink)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert lse.shape == ref_lse.shape and lse.stride() == ref_lse.stride()  # [b, h_q, s_q] view of [b, s_q, h_q]
    assert_close(out, ref_out, DECODE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")
    return out, lse


CASES = [  # b, s_q, topk, page, num_blocks, sink, ragged, extra (fmt, placement, topk, page, blocks)
    (1, 1, 64, 64, 4, False, False, None),
    (2, 2, 100, 5, 60, True, True, None),                       # a partial last step, rows with no token
    (3, 1, 128, 16, 20, True, True, (F.V41_FP4, "interleaved", 64, 16, 8)),
    (2, 1, 70, 7, 30, False, False, (F.V41_FP8, "interleaved", 80, 4, 40)),
]


@pytest.mark.parametrize("b,s_q,topk,page,num_blocks,with_sink,ragged,extra", CASES)
def test_matches_reference(b, s_q, topk, page, num_blocks, with_sink, ragged, extra):
    q, scopes = _case(*FP8, b, s_q, 16, topk, page, num_blocks, seed=topk + b, ragged=ragged, extra=extra)
    out, lse = _check(q, scopes, _sink(16, topk) if with_sink else None, 512 ** -0.55)
    assert not torch.isnan(out).any()
    if ragged and extra is None:  # request 0 read nothing: zero output, lse +inf
        assert out[0].abs().max() == 0 and bool((lse[0] == math.inf).all())


@settings(max_examples=6, deadline=None)
@given(b=st.integers(1, 3), topk=st.integers(64, 128), with_sink=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_random_shapes(b, topk, with_sink, seed):
    q, scopes = _case(*FP8, b, 1, 16, topk, 8, 40, seed=seed, ragged=seed % 2 == 0,
                      extra=(F.V41_FP4, "interleaved", 64, 8, 12) if seed % 3 == 0 else None)
    _check(q, scopes, _sink(16, seed) if with_sink else None)


@pytest.mark.parametrize("fmt,placement,extra", [
    (F.V32_FP8, None, None),                                              # d_qk 576: four 128-deep + one 64-deep QK
    (F.MODEL1_FP8, None, (F.V41_FP4, "block_split", 64, 4, 20)),
    (F.V41_FP8, "block_split", (F.V41_FP8, "block_split", 70, 3, 30)),
])
def test_other_formats_match_reference(fmt, placement, extra):
    # topk 100 / 70 / 64: a partial last step in each scope; pages of 7 / 3 / 4 tokens
    q, scopes = _case(fmt, placement, 2, 1, 16, 100, 7, 20, seed=3, ragged=True, extra=extra)
    _check(q, scopes, _sink(16, 3), fmt.d_qk ** -0.5)


def test_more_rows_than_cube_cores():
    # 40 rows on the twin's 32 cube cores: blocks 0..7 run two work items (flags and credits carry over)
    q, scopes = _case(*FP8, 20, 2, 16, 70, 8, 40, seed=8, ragged=True, extra=(F.V41_FP4, "interleaved", 64, 8, 12))
    assert q.shape[0] * q.shape[1] > sparse_attn.LIB.num_cube_cores(q.device)
    _check(q, scopes, _sink(16, 8))


@pytest.mark.parametrize("extra_placement", ["interleaved", "block_split"])
def test_gathers_only_the_records_rows_read(monkeypatch, extra_placement):
    # the twin's MTE2 byte count: Q once per row, the sink, and one record per valid token (data and scale
    # rows of a block-split one) -- nothing for -1 ids or positions past topk_length
    launches = []
    launch = AscendKernelHandle.launch
    monkeypatch.setattr(AscendKernelHandle, "launch", lambda self, *a: launches.append(launch(self, *a)) or launches[-1])
    q, scopes = _case(*FP8, 3, 1, 16, 100, 8, 40, seed=6, ragged=True, extra=(F.V41_FP4, extra_placement, 64, 8, 12))
    _check(q, scopes, _sink(16, 6))
    records = 0
    for s in scopes:
        keep = (s.indices >= 0) & (torch.arange(s.indices.shape[-1]) < s.topk_length.view(-1, 1, 1))
        records += int(keep.sum()) * s.fmt.bytes_per_token
    rows = q.shape[0] * q.shape[1]
    assert launches[-1].total_bytes("MTE2") == records + rows * 16 * (512 * 2 + 4)


@pytest.mark.parametrize("fmt,placement,h_q,extra", [
    (F.V41_FP8, "interleaved", 128, (F.V41_FP4, "interleaved", 64, 16, 8)),
    (F.MODEL1_FP8, None, 64, (F.V41_FP8, "block_split", 64, 4, 20)),
    (F.V41_FP8, "block_split", 64, (F.V41_FP4, "block_split", 64, 4, 20)),
])
def test_served_through_the_table(monkeypatch, fmt, placement, h_q, extra):
    # extra caches in each placement reach the Ascend kernel (kv_layout names the V4.1 placement); one cache
    # of each format: test_sparse_decode.py's test_matches_reference
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    q, scopes = _case(fmt, placement, 2, 1, h_q, 64, 16, 12, seed=h_q, ragged=True, extra=extra)
    sink = _sink(h_q, 1)
    scale = fmt.d_qk ** -0.5
    assert _dispatch.TABLE.serves("sparse_decode", q.device, q, scopes, scale, 512, sink, False) == "ascend"
    out, lse = _run(q, scopes, sink, layout=scopes[-1].placement)  # one kv_layout for both caches' V4.1 placement
    ref_out, ref_lse = reference.sparse_decode(q, scopes, scale, 512, sink)
    assert_close(out, ref_out, DECODE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")


@pytest.mark.npu
def test_on_the_npu():
    q, scopes = _case(*FP8, 2, 1, 64, 128, 16, 20, seed=7, ragged=True, extra=(F.V41_FP4, "interleaved", 64, 16, 8))
    dev = torch.device(DEVICE)
    nq = q.to(dev)
    nscopes = [KVScope(s.cache.to(dev), s.fmt, s.placement, s.indices.to(dev),
                       None if s.topk_length is None else s.topk_length.to(dev)) for s in scopes]
    sink = _sink(64, 7)
    out, lse = _run(nq, nscopes, sink.to(dev))
    ref_out, ref_lse = reference.sparse_decode(q, scopes, 512 ** -0.5, 512, sink)
    assert_close(out.cpu(), ref_out, DECODE_OUT, "out")
    assert_close(lse.cpu(), ref_lse, DECODE_LSE, "lse")


@pytest.mark.parametrize("scale", [-0.3, -40.0, 0.0])
def test_non_positive_scale(scale):
    """The step max is taken before scaling (online_softmax.h): a negative scale turns it into the scaled
    logits' minimum, which must not become the reference max; a zero scale gives uniform weights."""
    q, scopes = _case(*FP8, 2, 1, 16, 64, 64, 4, seed=5, ragged=False, extra=None)
    _check(q, scopes, None, scale)
