"""A top logit above 2^24 tied between tokens: every backend (the reference, the contract; the host kernels; the
Ascend kernels on deepjit's twin) gives the tied tokens' mean value, not twice it (FP32 logsumexp cannot hold
log 2 there; weights are normalised by their own sum, as upstream's references' torch.softmax and every kernel
do)."""
import pytest
import torch

import flash_mla

from . import tied_logits as T

TOL = dict(atol=2e-2, rtol=2e-2)  # bf16 output of an exact fp32 mean


def _assert_mean(out: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(out.float(), want.expand_as(out), **TOL)


def _served(backend, op: str) -> None:
    assert backend != "ascend" or backend.served == [op]


def test_sparse_prefill(backend):
    q, kv, idx, want = T.prefill(2, 64)
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, T.SCALE)
    _assert_mean(out, want)
    assert bool((max_logits == 2.0 ** 25).all()) and bool((lse == 2.0 ** 25).all())
    _served(backend, "sparse_prefill")


@pytest.mark.parametrize("fmt", [flash_mla.kv_cache.KVCacheFormat.V41_FP8, flash_mla.kv_cache.KVCacheFormat.V32_FP8])
def test_sparse_decode(backend, fmt):
    q, scopes, want = T.decode(2, 64, fmt)
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, scopes[0].cache, None, None, 512, meta, None, T.SCALE,
                                                indices=scopes[0].indices)
    _assert_mean(out, want)
    assert bool((lse == 2.0 ** 25).all())
    _served(backend, "sparse_decode")


def test_dense_decode(backend):
    page, n = 16, 32
    k = T.keys(n, 576, seed=3)
    k_cache = k.bfloat16().view(2, page, 1, 576)
    q = T.queries(2, 1, 16, 576)
    table = torch.tensor([[0, 1], [0, 1]], dtype=torch.int32)
    lens = torch.tensor([n, 20], dtype=torch.int32)
    meta, _ = flash_mla.get_mla_metadata()
    out, _ = flash_mla.flash_mla_with_kvcache(q, k_cache, table, lens, 512, meta, softmax_scale=T.SCALE,
                                              is_fp8_kvcache=False)
    _assert_mean(out, T.expected(k, 512))
    _served(backend, "dense_decode")


def test_varlen_attention(backend):
    total_k, h = 24, 4
    k = T.keys(total_k, 64, seed=4)
    v = torch.randn(total_k, h, 64, generator=torch.Generator().manual_seed(5)).bfloat16()
    q = T.queries(6, h, 64)
    kk = k.bfloat16().view(total_k, 1, 64).expand(total_k, h, 64).contiguous()
    cu_q = torch.tensor([0, 6], dtype=torch.int32)
    cu_k = torch.tensor([0, total_k], dtype=torch.int32)
    want = (v[T.TIED[0]].float() + v[T.TIED[1]].float()) / 2          # [h, 64]
    out, _ = flash_mla.flash_attn_varlen_func(q, kk, v, cu_q, cu_k, 6, total_k, softmax_scale=T.SCALE)
    _assert_mean(out, want)
    _served(backend, "varlen_attention")
