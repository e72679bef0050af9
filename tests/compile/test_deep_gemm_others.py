"""The rest of deep_gemm's public functions under ``torch.compile(fullgraph=True)``: the einsum forms, the HC
pre-norm and head-splitting GEMMs, the MQA logits (plain, paged, the paged schedule) and the scale-factor layout
helpers. Traced without a graph break and equal to the eager calls (logits by value: the op returns its own
storage where the eager call returns rows of a padded buffer). Excluded: the Mega MoE (``fp8_fp4_mega_moe`` and
``bf16_mega_moe`` communicate through a ``SymmBuffer`` across ranks, as DeepEP's buffers, which upstream does not
trace either) and the load-time helpers (``transform_weights_for_mega_moe``, runtime settings)."""
import torch

import deep_gemm
from deep_gemm.testing.generators import generate_normal, randn
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8
from tests.deep_gemm.test_mqa_logits import _paged_cache, _quant_kv, _quant_q, _ranges


def _same_as_eager(fn, *args):
    torch._dynamo.reset()
    got, want = torch.compile(fn, fullgraph=True, backend="aot_eager")(*args), fn(*args)
    for x, y in zip(got, want, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)
    return got


def test_einsum_forms_hc_prenorm_and_skip_head_mid():
    b, h, r, dd = 4, 2, 256, 128
    x, w = randn(b, h, r), randn(h, dd, r)
    q, sf = per_token_cast_to_fp8(x.reshape(-1, r), use_ue8m0=False)
    blocks = [per_block_cast_to_fp8(w[i], use_ue8m0=False) for i in range(h)]
    qb = (torch.stack([p[0] for p in blocks]), torch.stack([p[1] for p in blocks]))
    case = generate_normal(64, 128, 128, "fp8")

    def f(xa, xb, acc, hx, hw, a0, a1, b0, b1, hc_a, hc_b, s0, s1, t0, t1):
        acc = acc.clone()
        deep_gemm.einsum("bmk,bnk->mn", xa, xb, acc, c=acc)          # in place: c is d
        d16 = torch.empty(b, h, r, dtype=torch.bfloat16)
        deep_gemm.einsum("bhd,hdr->bhr", hx, hw, d16)
        d8 = torch.empty(b, h, dd, dtype=torch.bfloat16)
        deep_gemm.fp8_einsum("bhr,hdr->bhd", (a0, a1), (b0, b1), d8)
        hc, sqr = torch.empty(2, 7, 5), torch.empty(2, 7)
        deep_gemm.tf32_hc_prenorm_gemm(hc_a, hc_b, hc, sqr, num_splits=2)
        skip = torch.zeros(64, 128 + 2 * 16, dtype=torch.bfloat16)
        deep_gemm.fp8_gemm_nt_skip_head_mid((s0, s1), (t0, t1), skip, (32, 16, 32))
        return acc, d16, d8, hc, sqr, skip

    acc = torch.randn(16, 32)
    xa, xb = randn(3, 16, 64), randn(3, 32, 64)
    got = _same_as_eager(f, xa, xb, acc, randn(b, h, dd), randn(h, dd, r), q.view(b, h, r), sf.view(b, h, -1), *qb,
                         randn(7, 64), torch.randn(5, 64), *case.a, *case.b)
    # the in-place accumulation really added to c = d (not to a copy)
    assert torch.allclose(got[0], acc + torch.einsum("bmk,bnk->mn", xa.float(), xb.float()), atol=1e-3, rtol=1e-3)


def test_mqa_logits_paged_logits_and_schedule():
    s, s_kv, heads, hd = 8, 64, 8, 64
    q, kv, weights = randn(s, heads, hd), randn(s_kv, hd), torch.randn(s, heads)
    ks, ke = _ranges(s, s_kv, True)
    (qq, _), (qkv, _) = _quant_q(q, False), _quant_kv(kv, False)
    batch, block_kv, ctx = 2, 32, 64
    table = torch.arange(batch * 2, dtype=torch.int32).view(batch, 2)
    pkv = randn(batch, ctx, 128)
    parts = [_paged_cache(pkv[i], block_kv, False, batch * 2, table[i].tolist()) for i in range(batch)]
    cache = sum(p[0].view(torch.uint8).to(torch.int32) for p in parts).to(torch.uint8)
    lens = torch.tensor([[40], [64]], dtype=torch.int32)
    (pq, _), _ = _quant_q(randn(batch, 16, 128), False)
    pw = torch.randn(batch, 16)

    def f(q0, k0, k1, w, ks, ke, pq, cache, pw, lens, table):
        plain = deep_gemm.fp8_mqa_logits(q0, (k0, k1), w, ks, ke)
        packed = deep_gemm.fp8_fp4_mqa_logits((q0, None), (k0, k1), w, ks, ke, clean_logits=False, max_seqlen_k=64)
        packed = packed.masked_fill(torch.arange(64) >= (ke - ks)[:, None], 0)   # columns past a range: unwritten
        meta = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, deep_gemm.get_num_sms())
        paged = deep_gemm.fp8_fp4_paged_mqa_logits((pq.view(batch, 1, 16, 128), None), cache, pw, lens, table, meta,
                                                   ctx, clean_logits=True)
        legacy = deep_gemm.fp8_paged_mqa_logits(pq.view(batch, 1, 16, 128), cache, pw, lens, table, meta, ctx, True)
        return plain, packed, meta, paged, legacy

    _same_as_eager(f, qq[0], *qkv, weights, ks, ke, pq, cache, pw, lens, table)


def test_scale_factor_layout_helpers():
    g = torch.Generator().manual_seed(4)
    pow2 = lambda *shape: torch.exp2(torch.randint(-8, 8, shape, generator=g).float())  # noqa: E731
    layout = torch.tensor([128, 384], dtype=torch.int32)

    def f(sf, sfb, k_sf, asc_sf):
        return (deep_gemm.get_mn_major_tma_aligned_tensor(sf),
                deep_gemm.utils.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf),
                deep_gemm.transform_sf_into_required_layout(sfb, 64, 256, (1, 128, 128), is_sfa=True),
                deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(k_sf, layout, [128, 256], 128, 128),
                deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(k_sf, layout, None, 128, 128,
                                                                                 use_psum_layout=True),
                deep_gemm.transform_k_grouped_sf_into_required_layout(asc_sf, 16, 384, (1, 1, 32), True, layout))

    got = _same_as_eager(f, pow2(30, 6), pow2(64, 2), pow2(3, 16), pow2(16, 12))
    assert got[0].stride() == deep_gemm.get_mn_major_tma_aligned_tensor(pow2(30, 6)).stride()


def test_k_grouped_accumulating_into_d():
    """``c=d`` (accumulate into d) traces: the compiled graph hands the op a functional copy of ``d`` and
    ``c`` as a separate tensor of the same values, and writes the result back into the caller's ``d``."""
    from deep_gemm.testing.generators import generate_k_grouped_contiguous
    previous = deep_gemm.get_mk_alignment_for_contiguous_layout()
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    for kind, gran_k in (("fp8", 128), ("bf16", None)):
        case = generate_k_grouped_contiguous(3, 64, 96, [70, 0, 33], kind, gran_k, False)

        def f(a, b, d, layout, kind=kind, case=case, gran_k=gran_k):
            if kind == "bf16":
                deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, case.ks_cpu, layout, c=d)
            else:
                deep_gemm.k_grouped_fp8_gemm_tn_contiguous(a, b, d, case.ks_cpu, layout, c=d, recipe=(1, 1, gran_k))
            return (d * 1,)
        torch._dynamo.reset()
        d_compiled, d_eager = case.c.clone(), case.c.clone()
        got = torch.compile(f, fullgraph=True, backend="aot_eager")(case.a, case.b, d_compiled, case.grouped_layout)
        f(case.a, case.b, d_eager, case.grouped_layout)
        assert torch.equal(d_compiled, d_eager) and torch.equal(got[0], d_eager)
        assert not torch.equal(d_eager, case.c)      # the call did accumulate
    deep_gemm.set_mk_alignment_for_contiguous_layout(previous)
