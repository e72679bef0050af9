"""``torch.ops.deep_gemm.*``: every public GEMM family, the MQA logits (plain and paged), the paged
metadata and the scale-factor layout transform are registered with meta shapes and mutation annotations,
so ``torch.compile`` (fullgraph, aot_eager: fake tensors and functionalisation) traces a module calling
them on CPU, and the compiled module gives the eager public functions' results bit for bit."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing.generators import (
    generate_k_grouped_contiguous,
    generate_m_grouped_contiguous,
    generate_m_grouped_masked,
    generate_normal,
    randn,
)
from deep_gemm.utils import per_token_cast_to_fp8

from .test_mqa_logits import _paged_cache, _quant_kv, _quant_q

ops = torch.ops.deep_gemm


def _compiled_equals_eager(module, *inputs, dynamic=None):
    got = torch.compile(module, fullgraph=True, backend="aot_eager", dynamic=dynamic)(*inputs)
    want = module(*inputs)
    assert len(got) == len(want)
    for x, y in zip(got, want, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)
    return got


def _written(schema_op) -> list:
    return [a.name for a in schema_op.default._schema.arguments if a.alias_info and a.alias_info.is_write]


def test_ops_are_registered_with_mutation_annotations():
    for name in ("fp8_fp4_gemm_nt", "fp8_gemm_tn", "bf16_gemm_nn", "m_grouped_fp8_fp4_gemm_nt_contiguous",
                 "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked", "m_grouped_bf16_gemm_nt_masked",
                 "k_grouped_fp8_gemm_tn_contiguous", "k_grouped_bf16_gemm_tn_contiguous"):
        assert _written(getattr(ops, name)) == ["d"], name
    for name in ("fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits", "get_paged_mqa_logits_metadata",
                 "transform_sf_into_required_layout"):
        assert _written(getattr(ops, name)) == [], name


class _Dense(torch.nn.Module):
    def forward(self, a, sfa, b, sfb, a16, b16):
        d = torch.empty(a.shape[0], b.shape[0], dtype=torch.bfloat16)
        ops.fp8_fp4_gemm_nt(a, sfa, b, sfb, d)
        d16 = torch.empty(a16.shape[0], b16.shape[0], dtype=torch.bfloat16)
        ops.bf16_gemm_nt(a16, b16, d16)
        acc = torch.ones(a16.shape[0], b16.shape[0])
        ops.bf16_gemm_nn(a16, b16.t().contiguous(), acc, acc.clone())
        return d.float() * 2, d16, acc


def test_dense_gemms_compile():
    fp8, bf16 = generate_normal(64, 48, 128, "fp8"), generate_normal(32, 40, 64, "bf16")
    got = _compiled_equals_eager(_Dense(), *fp8.a, *fp8.b, bf16.a, bf16.b)
    d = torch.empty_like(fp8.d)
    deep_gemm.fp8_fp4_gemm_nt(fp8.a, fp8.b, d)
    assert torch.equal(got[0], d.float() * 2)
    assert torch.equal(got[1], bf16.ref_d)


class _Grouped(torch.nn.Module):
    def forward(self, a, sfa, b, sfb, layout, a16, b16, layout16, ma, mb, masked_m, expected_m, ka, kb, ks, k_layout):
        d = torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16)
        ops.m_grouped_fp8_fp4_gemm_nt_contiguous(a, sfa, b, sfb, d, layout)
        d16 = torch.full((a16.shape[0], b16.shape[1]), 3.0, dtype=torch.bfloat16)
        ops.m_grouped_bf16_gemm_nt_contiguous(a16, b16, d16, layout16, ensure_zero_padding=False)
        dm = torch.zeros(ma.shape[0], ma.shape[1], mb.shape[1], dtype=torch.bfloat16)
        ops.m_grouped_bf16_gemm_nt_masked(ma, mb, dm, masked_m, expected_m)
        dk = torch.empty(len(ks), ka.shape[1], kb.shape[1])
        ops.k_grouped_bf16_gemm_tn_contiguous(ka, kb, dk, ks, k_layout, torch.zeros_like(dk))
        return d, d16, dm, dk


def test_grouped_gemms_compile():
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    fp8 = generate_m_grouped_contiguous(2, 20, 48, 128, "fp8")
    bf16 = generate_m_grouped_contiguous(2, 20, 40, 64, "bf16")
    masked = generate_m_grouped_masked(2, 16, 8, 24, 64, "bf16")
    k = generate_k_grouped_contiguous(2, 16, 24, [32, 64], "bf16")
    got = _compiled_equals_eager(_Grouped(), *fp8.a, *fp8.b, fp8.grouped_layout, bf16.a, bf16.b, bf16.grouped_layout,
                                 masked.a, masked.b, masked.masked_m, 8, k.a, k.b, k.ks_cpu, k.grouped_layout)
    d = torch.empty_like(fp8.d)
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous(fp8.a, fp8.b, d, fp8.grouped_layout)
    assert torch.equal(got[0], d)
    for g, m in enumerate(masked.masked_m.tolist()):
        want = torch.empty(m, 24, dtype=torch.bfloat16)
        deep_gemm.bf16_gemm_nt(masked.a[g, :m].contiguous(), masked.b[g], want)
        assert torch.equal(got[2][g, :m], want) and bool((got[2][g, m:] == 0).all())


class _Logits(torch.nn.Module):
    def forward(self, q, kv, kv_sf, weights, ks, ke, pq, cache, pweights, lens, table, max_ctx, num_sms):
        logits = ops.fp8_fp4_mqa_logits(q, None, kv, kv_sf, weights, ks, ke)
        meta = ops.get_paged_mqa_logits_metadata(lens, 32, num_sms)
        paged = ops.fp8_fp4_paged_mqa_logits(pq, None, cache, pweights, lens, table, meta, max_ctx, True)
        return logits.nan_to_num(neginf=-1.0), meta, paged.nan_to_num(neginf=-1.0)


def test_mqa_logits_and_paged_compile():
    s, s_kv, h, d = 4, 24, 8, 64
    (q, _), _ = _quant_q(randn(s, h, d), False)
    (kv, kv_sf), _ = _quant_kv(randn(s_kv, d), False)
    weights = torch.randn(s, h)
    ks, ke = torch.zeros(s, dtype=torch.int32), torch.arange(s, dtype=torch.int32) + (s_kv - s) + 1
    batch, pages, block_kv, dp = 2, 3, 32, 128
    table = torch.randperm(batch * pages).view(batch, pages).to(torch.int32)
    cache = sum(_paged_cache(randn(pages * block_kv, dp), block_kv, False, batch * pages, table[b].tolist())[0]
                .view(torch.uint8).to(torch.int32) for b in range(batch)).to(torch.uint8)
    (pq, _), _ = _quant_q(randn(batch, h, dp), False)
    lens = torch.tensor([[40], [90]], dtype=torch.int32)
    got = _compiled_equals_eager(_Logits(), q, kv, kv_sf, weights, ks, ke, pq.view(batch, 1, h, dp), cache,
                                 torch.randn(batch, h), lens, table, pages * block_kv, deep_gemm.get_num_sms())
    want = deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), weights, ks, ke)
    assert torch.equal(got[0], want.nan_to_num(neginf=-1.0))
    assert torch.equal(got[1], deep_gemm.get_paged_mqa_logits_metadata(lens, 32, deep_gemm.get_num_sms()))
    assert got[2].shape == (batch, pages * block_kv) and bool((got[2][0, 40:] == -1.0).all())


class _Layout(torch.nn.Module):
    def forward(self, sf, mn, k):
        return (ops.transform_sf_into_required_layout(sf, mn, k, [1, 128]),
                ops.transform_sf_into_required_layout(sf, mn, k, [1, 128], disable_ue8m0_cast=True))


@pytest.mark.parametrize("mn", [48, 40])
def test_sf_layout_transform_compiles_with_upstream_strides(mn):
    _, sf = per_token_cast_to_fp8(randn(mn, 512), use_ue8m0=True)
    got = _compiled_equals_eager(_Layout(), sf, mn, 512, dynamic=False)   # its meta needs concrete sizes
    for out, cast in zip(got, (True, False), strict=True):
        want = deep_gemm.transform_sf_into_required_layout(sf, mn, 512, (1, 128), disable_ue8m0_cast=not cast)
        assert out.stride() == want.stride() and torch.equal(out, want)
