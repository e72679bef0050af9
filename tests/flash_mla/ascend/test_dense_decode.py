"""flash_mla's Ascend dense decode kernel (flash_mla/ascend/dense_attn.asc, paged form) on deepjit's
Ascend twin (CPU tensors, FMLA_BACKEND=ascend) through flash_mla_with_kvcache without indices, against
the FP32 reference at upstream's dense-decode tolerances, at DeepSeek's MLA head dims (d_qk 576, d_v 512): MQA
with 80 query heads (a full and a partial 64-row cube block), sequence lengths off the 64-key step and the
page, an empty request (out 0, lse +inf), NaN in the cache past each length and junk block ids in unused
table entries (never read); the kernel's own clamping of lengths and block ids. GQA with s_q > 1 under a
causal mask and FP16 run on every backend in tests/flash_mla/test_dense.py."""
import math

import pytest
import torch

import flash_mla
from flash_mla import _dispatch, reference
from tests.testkit.npu import DEVICE

from ..compare import DECODE_LSE, DENSE_OUT, assert_close
from ..test_dense import _dense_case


@pytest.mark.parametrize("b,s_q,h_q,h_kv,causal,mean_sk,page,dtype", [
    (2, 1, 80, 1, False, 90, 64, torch.bfloat16),   # MQA: 80 heads = 64 + 16 rows
])
def test_served_by_ascend_and_matches_reference(monkeypatch, b, s_q, h_q, h_kv, causal, mean_sk, page, dtype):
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    q, k_cache, block_table, seqlens = _dense_case(b, s_q, h_q, h_kv, mean_sk, page, dtype, seed=h_q)
    assert int(seqlens[1]) % 64 and int(seqlens[0]) == 0 and int(seqlens[1]) % page
    args = (q, k_cache, block_table, seqlens, 512, 576 ** -0.5, causal)
    assert _dispatch.TABLE.serves("dense_decode", q.device, *args) == "ascend"
    out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512,
                                                flash_mla.get_mla_metadata()[0], causal=causal)
    ref_out, ref_lse = reference.dense_decode(*args)
    assert out.shape == (b, s_q, h_q, 512) and out.dtype == dtype and lse.shape == (b, h_q, s_q)
    assert_close(out, ref_out, DENSE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")
    assert out[0].abs().max() == 0 and bool((lse[0] == math.inf).all())
    assert not torch.isnan(out).any()


def test_fp8_cache_without_indices_is_refused(monkeypatch):
    # upstream's dense decode has no FP8 cache form: a quantised cache needs indices (sparse mode)
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    q, k_cache, block_table, seqlens = _dense_case(1, 1, 16, 1, 40, 64, torch.bfloat16, seed=1)
    with pytest.raises(ValueError, match="no FP8 path"):
        flash_mla.flash_mla_with_kvcache(q, k_cache.view(torch.uint8), block_table, seqlens, 512,
                                         flash_mla.get_mla_metadata()[0])


def test_kernel_clamps_lengths_and_block_ids():
    # device tensors' values are not checked on the host: the kernel itself clamps cache_seqlens to the
    # table's width and block ids to the cache (the twin fails any out-of-bounds access naming the tensor)
    from flash_mla.ascend import dense_attn
    g = torch.Generator().manual_seed(5)
    q = (torch.randn(3, 1, 4, 576, generator=g) / 10).bfloat16()
    k_cache = (torch.randn(4, 16, 1, 576, generator=g) / 10).bfloat16()
    block_table = torch.tensor([[0, 9, -7], [3, 2, 1], [2, 2147483647, 0]], dtype=torch.int32)
    seqlens = torch.tensor([-5, 1000, 40], dtype=torch.int32)
    out, lse = dense_attn.dense_decode(q, k_cache, block_table, seqlens, 512, 576 ** -0.5, False)
    clamped = (block_table.clamp(0, 3), seqlens.clamp(0, 48))
    ref_out, ref_lse = reference.dense_decode(q, k_cache, *clamped, 512, 576 ** -0.5, False)
    assert_close(out, ref_out, DENSE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")


@pytest.mark.npu
def test_on_the_npu():
    q, k_cache, block_table, seqlens = _dense_case(3, 2, 128, 1, 300, 64, torch.bfloat16, seed=9)
    dev = torch.device(DEVICE)
    out, lse = flash_mla.flash_mla_with_kvcache(q.to(dev), k_cache.to(dev), block_table.to(dev), seqlens.to(dev), 512,
                                                flash_mla.get_mla_metadata()[0], causal=True)
    ref_out, ref_lse = reference.dense_decode(q, k_cache, block_table, seqlens, 512, 576 ** -0.5, True)
    assert_close(out.cpu(), ref_out, DENSE_OUT, "out")
    assert_close(lse.cpu(), ref_lse, DECODE_LSE, "lse")
