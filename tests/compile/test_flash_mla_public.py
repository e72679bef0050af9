"""``flash_mla.flash_mla_with_kvcache`` (sparse and dense decode) and ``flash_mla_sparse_fwd`` themselves under
``torch.compile(fullgraph=True)``: traced without a graph break, equal to the eager calls."""
import torch

import flash_mla
from tests.flash_mla.test_dense import _dense_case
from tests.flash_mla.test_sparse_decode import F, _case


def test_with_kvcache_sparse_and_dense_and_sparse_prefill():
    q, scopes = _case(F.V32_FP8, None, 1, 1, 64, 32, 7, 6, seed=3, ragged=True)
    sink = torch.randn(64)
    dq, dcache, table, seqlens = _dense_case(2, 2, 8, 1, 40, 64, torch.bfloat16, seed=5)
    g = torch.Generator().manual_seed(2)
    sq, skv = torch.randn(3, 64, 576, generator=g).bfloat16(), torch.randn(20, 1, 576, generator=g).bfloat16()
    sidx = torch.randint(-1, 20, (3, 1, 8), generator=g, dtype=torch.int32)

    def f(q, cache, indices, topk_length, sink, dq, dcache, seqlens, table, sq, skv, sidx):
        meta = flash_mla.get_mla_metadata()[0]
        out, lse = flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, softmax_scale=0.05,
                                                    indices=indices, attn_sink=sink, topk_length=topk_length)
        dout, dlse = flash_mla.flash_mla_with_kvcache(dq, dcache, table, seqlens, 512, flash_mla.get_mla_metadata()[0],
                                                      softmax_scale=0.04, causal=True, is_fp8_kvcache=False)
        pout, pmax, plse = flash_mla.flash_mla_sparse_fwd(sq, skv, sidx, 0.1, 512)
        return out, lse, dout, dlse, pout, pmax, plse

    inputs = (q, scopes[0].cache, scopes[0].indices, scopes[0].topk_length, sink, dq, dcache, seqlens, table,
              sq, skv, sidx)
    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(*inputs)
    want = f(*inputs)
    for x, y in zip(got, want, strict=True):
        assert x.shape == y.shape and torch.equal(x, y)


def test_varlen_prefill_forms_and_kv_cache_helpers():
    """The dense varlen prefill functions (forward: the op form has no autograd formula, so a call needing
    gradients takes the autograd function) and the KV-cache helpers (plain tensor code)."""
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(10, 4, 64, generator=g).bfloat16() for _ in range(3))
    cu = torch.tensor([0, 3, 10], dtype=torch.int32)
    bf16_cache = torch.randn(2, 64, 1, 576, generator=g).bfloat16()

    def f(q, k, v, cu, cache):
        out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu, cu, 7, 7, causal=True)
        packed = flash_mla.flash_attn_varlen_qkvpacked_func(torch.cat([q, k, v], -1), cu, 7, 64)
        kv_packed = flash_mla.flash_attn_varlen_kvpacked_func(q, torch.cat([k, v], -1), cu, cu, 7, 7, 64)
        quant = flash_mla.quantize_k_cache(cache, flash_mla.KVCacheFormat.V32_FP8)
        return out, lse, *packed, *kv_packed, quant.view(torch.uint8), flash_mla.dequantize_k_cache(quant)

    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, cu, bf16_cache)
    want = f(q, k, v, cu, bf16_cache)
    for x, y in zip(got, want, strict=True):
        assert x.shape == y.shape and x.stride() == y.stride() and torch.equal(x, y)
