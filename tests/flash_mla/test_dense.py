"""Dense paths: paged decode (host and Ascend twin vs reference) and the varlen prefill functions (vs torch SDPA)."""
import math

import pytest
import torch
import torch.nn.functional as F

import flash_mla
from flash_mla import reference

from .compare import DECODE_LSE, DENSE_OUT, assert_close


def _dense_case(b, s_q, h_q, h_kv, mean_sk, page, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    seqlens = (torch.randn(b, generator=g) * mean_sk / 2 + mean_sk).clamp(min=s_q).int()
    seqlens[0] = 0
    max_blocks = int(math.ceil(int(seqlens.max()) / page)) + 1
    block_table = torch.randperm(b * max_blocks, generator=g).view(b, max_blocks).int()
    k_cache = (torch.randn(b * max_blocks, page, h_kv, 576, generator=g) / 10).clamp(-1, 1)
    for i in range(b):  # NaN past each request's length, out-of-range ids in unused table entries
        n = int(seqlens[i])
        k_cache.view(-1, page, h_kv, 576)[block_table[i, n // page].long(), n % page:] = float("nan")
        k_cache[block_table[i, n // page + 1:].long()] = float("nan")
        block_table[i, n // page + 1:] = 2147480000
    q = (torch.randn(b, s_q, h_q, 576, generator=g) / 10).clamp(-1, 1)
    return q.to(dtype), k_cache.to(dtype), block_table, seqlens


@pytest.mark.parametrize("b,s_q,h_q,h_kv,causal,dtype", [
    (3, 1, 128, 1, False, torch.bfloat16),
    (2, 3, 9, 3, True, torch.bfloat16),
    (2, 2, 16, 2, True, torch.float16),   # fp16: the reference path on the host, the kernel on Ascend
])
@pytest.mark.backends("host", "ascend", why="compares with the reference itself")
def test_dense_decode(backend, b, s_q, h_q, h_kv, causal, dtype):
    q, k_cache, block_table, seqlens = _dense_case(b, s_q, h_q, h_kv, 150, 64, dtype, seed=h_q)
    meta, _ = flash_mla.get_mla_metadata()
    # positional form of the 2026-04 API, which passed is_fp8_kvcache=False; the latest default (True) also works
    out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, meta, None, None, causal, False)
    again, _ = flash_mla.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, flash_mla.get_mla_metadata()[0],
                                                causal=causal)
    assert torch.equal(out, again)
    ref_out, ref_lse = reference.dense_decode(q, k_cache, block_table, seqlens, 512, 576 ** -0.5, causal)
    assert out.dtype == dtype and out.shape == (b, s_q, h_q, 512) and lse.shape == (b, h_q, s_q)
    assert_close(out, ref_out, DENSE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")
    assert out[0].abs().max() == 0 and bool((lse[0] == math.inf).all())
    assert backend != "ascend" or backend.served == ["dense_decode"] * 2


def _sdpa(q, k, v, cu_q, cu_k, scale, causal):
    outs, lses = [], []
    rep = q.shape[1] // k.shape[1]
    for i in range(cu_q.numel() - 1):
        qi = q[cu_q[i]:cu_q[i + 1]].float().transpose(0, 1)
        ki = k[cu_k[i]:cu_k[i + 1]].float().transpose(0, 1).repeat_interleave(rep, 0)
        vi = v[cu_k[i]:cu_k[i + 1]].float().transpose(0, 1).repeat_interleave(rep, 0)
        mask = torch.ones(qi.shape[1], ki.shape[1], dtype=torch.bool)
        if causal:
            mask = mask.tril(ki.shape[1] - qi.shape[1])
        outs.append(F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=scale).transpose(0, 1))
        lses.append(torch.logsumexp((qi @ ki.transpose(1, 2) * scale).masked_fill(~mask, -math.inf), -1).t())
    return torch.cat(outs), torch.cat(lses)


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_forward_backward(causal):
    g = torch.Generator().manual_seed(int(causal))
    seqlens_q, seqlens_k = [5, 9, 3], [7, 9, 12]
    cu_q = torch.tensor([0] + list(torch.tensor(seqlens_q).cumsum(0)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(torch.tensor(seqlens_k).cumsum(0)), dtype=torch.int32)
    q = (torch.randn(17, 4, 192, generator=g) / 10).bfloat16().requires_grad_()
    k = (torch.randn(28, 4, 192, generator=g) / 10).bfloat16().requires_grad_()
    v = (torch.randn(28, 4, 128, generator=g) / 10).bfloat16().requires_grad_()
    out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 12, causal=causal)
    assert lse.stride(0) == 1 and lse.shape == (17, 4)
    ref_out, ref_lse = _sdpa(q.detach(), k.detach(), v.detach(), cu_q, cu_k, 192 ** -0.5, causal)
    assert_close(out, ref_out, (1e-3, 8.01 / 128, 7e-6), "out")
    assert_close(lse, ref_lse, (1e-6, 2.01 / 65536, None), "lse")
    d_out = torch.randn(out.shape, generator=g).bfloat16()
    out.backward(d_out)
    q2, k2, v2 = (t.detach().float().requires_grad_() for t in (q, k, v))
    _sdpa(q2, k2, v2, cu_q, cu_k, 192 ** -0.5, causal)[0].backward(d_out.float())
    for name, a, r in (("dq", q.grad, q2.grad), ("dk", k.grad, k2.grad), ("dv", v.grad, v2.grad)):
        assert_close(a, r.to(a.dtype), (1e-3, 8.01 / 128, 7e-6), name)


def test_packed_variants_slice_the_last_dim():
    g = torch.Generator().manual_seed(0)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    qkv = (torch.randn(10, 2, 3 * 64, generator=g) / 10).bfloat16()
    out, lse = flash_mla.flash_attn_varlen_qkvpacked_func(qkv, cu, 6, 64, causal=True)
    ref = flash_mla.flash_attn_varlen_func(qkv[..., :64], qkv[..., 64:128], qkv[..., 128:], cu, cu, 6, 6, causal=True)
    assert torch.equal(out, ref[0]) and torch.equal(lse, ref[1])
    q = qkv[..., :64]
    out2, _ = flash_mla.flash_attn_varlen_kvpacked_func(q, qkv[..., 64:], cu, cu, 6, 6, 64, causal=True)
    assert torch.equal(out2, ref[0])


@pytest.mark.backends("host", "ascend", why="compares with the reference itself")
def test_varlen_matches_reference_gqa_and_empty_rows(backend):
    # GQA 8/2 heads; sequence 0 has more queries than keys, so its first causal row sees nothing.
    g = torch.Generator().manual_seed(7)
    cu_q = torch.tensor([0, 3, 23, 100], dtype=torch.int32)
    cu_k = torch.tensor([0, 2, 32, 200], dtype=torch.int32)
    q = (torch.randn(100, 8, 128, generator=g) / 10).bfloat16()
    k = (torch.randn(200, 2, 128, generator=g) / 10).bfloat16()
    v = (torch.randn(200, 2, 128, generator=g) / 10).bfloat16()
    out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 77, 168, causal=True)
    ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, 128 ** -0.5, True)
    assert_close(out, ref_out, (1e-3, 8.01 / 128, 7e-6), "out")
    assert_close(lse, ref_lse, (1e-6, 2.01 / 65536, None), "lse")
    assert out[0].abs().max() == 0 and bool((lse[0] == math.inf).all())
    assert backend != "ascend" or backend.served == ["varlen_attention"]
