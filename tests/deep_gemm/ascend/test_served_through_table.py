"""DG_BACKEND=ascend on CPU tensors: the public ops reach the Ascend kernels through deep_gemm's
backend table (run on deepjit's Ascend twin) and match the reference; forms without an Ascend
kernel are served by the reference."""
import pytest
import torch

import deep_gemm
from deep_gemm import _dispatch, reference
from deep_gemm.testing import calc_diff


def test_bf16_gemm_nt_runs_the_ascend_kernel(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    a, b = torch.randn(100, 200).bfloat16(), torch.randn(72, 200).bfloat16()
    d = torch.empty(100, 72, dtype=torch.float32)
    assert _dispatch.TABLE.serves("bf16_gemm_nt", a.device, a, b, d, None, None) == "ascend"
    deep_gemm.bf16_gemm_nt(a, b, d)
    want = torch.empty_like(d)
    reference.bf16_gemm_nt(a, b, want, None, None)
    assert calc_diff(d, want) < 1e-5


def test_every_op_with_an_ascend_kernel_is_in_the_table():
    served = {e.name for e in _dispatch.TABLE if e.ascend is not None}
    assert served == {"bf16_gemm_nt", "fp8_fp4_gemm_nt", "m_grouped_bf16_gemm_nt", "k_grouped_bf16_gemm_tn",
                      "mqa_logits", "paged_mqa_logits",
                      "m_grouped_fp8_fp4_gemm_nt", "m_grouped_bf16_gemm_nt_masked", "m_grouped_fp8_fp4_gemm_nt_masked",
                      "k_grouped_fp8_gemm_tn", "hc_prenorm_gemm", "bf16_einsum",
                      "fp8_bmm", "permute_rows", "paged_mqa_logits_metadata", "sf_copy", "sf_pack_ue8m0", "sf_unpack_ue8m0"}


def _ascend_sf(mn: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random UE8M0 scales per 32 K in the Ascend layout (int16 pairs, MN-major: K-block 2p in the low
    byte of word p), and the FP32 scales [mn, K-blocks] they stand for, 2^(e - 127) per exponent byte."""
    exponents = torch.randint(120, 134, (-(-k // 64), mn, 2), dtype=torch.uint8)
    scales = torch.pow(2.0, exponents.permute(1, 0, 2).reshape(mn, -1).double() - 127).float()
    return exponents.view(torch.int16).squeeze(-1).t(), scales


def test_fp8_fp4_gemm_nn_with_ascend_int16_scales_runs_the_ascend_kernel(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    m, n, k = 72, 40, 160
    sfa, scale_a = _ascend_sf(m, k)
    a = ((torch.randn(m, k) * 4).to(torch.float8_e4m3fn), sfa)
    b_kn = (torch.randn(k, n) * 4).to(torch.float8_e4m3fn)
    sfb, scale_b = _ascend_sf(n, k)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    deep_gemm.fp8_fp4_gemm_nn(a, (b_kn, sfb.t()), d, recipe=(1, 1, 32))
    a_deq = a[0].float() * scale_a[:, :k // 32].repeat_interleave(32, 1)
    b_deq = b_kn.t().float() * scale_b[:, :k // 32].repeat_interleave(32, 1)
    assert calc_diff(d, a_deq @ b_deq.t()) < 1e-3


def test_fp32_scales_with_a_mantissa_are_a_value_error_on_ascend(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    a = ((torch.randn(32, 256) * 4).to(torch.float8_e4m3fn), torch.ones(32, 2))
    b = ((torch.randn(16, 256) * 4).to(torch.float8_e4m3fn), torch.full((16, 2), 0.75))
    d = torch.full((32, 16), -7.0)
    with pytest.raises(ValueError, match=r"b\[1\] values: expected positive powers of two"):
        deep_gemm.fp8_fp4_gemm_nt(a, b, d, recipe=(1, 1, 128))
    assert torch.all(d == -7.0)


def test_masked_bf16_runs_the_ascend_kernel(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    a, b = torch.randn(2, 64, 96).bfloat16(), torch.randn(2, 48, 96).bfloat16()
    masked_m = torch.tensor([0, 50], dtype=torch.int32)
    d = torch.full((2, 64, 48), -7.0, dtype=torch.bfloat16)
    assert _dispatch.TABLE.serves("m_grouped_bf16_gemm_nt_masked", a.device, a, b, d, masked_m) == "ascend"
    deep_gemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m=32)
    want = d.clone()
    reference.m_grouped_bf16_gemm_nt_masked(a, b, want, masked_m)
    assert torch.equal(d[0], want[0]) and calc_diff(d[1, :50], want[1, :50]) < 1e-5
    assert torch.all(d[1, 50:] == -7.0)


def test_m_grouped_fp8_psum_runs_the_ascend_kernel(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    m, n, k, alignment = 512, 40, 128, deep_gemm.get_mk_alignment_for_contiguous_layout()
    ends = [min(m, 60), min(m, -(-60 // alignment) * alignment + 30)]
    layout = torch.tensor(ends, dtype=torch.int32)
    a = ((torch.randn(m, k) * 4).to(torch.float8_e4m3fn), torch.ones(m, k // 32))
    b = ((torch.randn(2, n, k) * 4).to(torch.float8_e4m3fn), torch.full((2, n, k // 32), 0.5))
    d = torch.full((m, n), -7.0, dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, layout, recipe=(1, 1, 32), use_psum_layout=True)
    want = torch.zeros(m, n)
    for g, (s, e) in enumerate(zip([0, -(-ends[0] // alignment) * alignment], ends, strict=True)):
        want[s:e] = a[0][s:e].float() @ (b[0][g].float() * 0.5).t()
    assert calc_diff(d, want) < 1e-3 and torch.all(d[ends[1]:] == 0)


def test_k_grouped_fp8_off_the_64_row_grid_runs_the_ascend_kernel(monkeypatch):
    """mk alignment 32: the second group starts at K row 32 (a partial first K tile, group-local scale pairs)."""
    monkeypatch.setenv("DG_BACKEND", "ascend")
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    ks, m, n = [32, 96], 40, 24
    a = ((torch.randn(sum(ks), m) * 4).to(torch.float8_e4m3fn), torch.exp2(torch.randint(-3, 4, (4, m)).float()))
    b = ((torch.randn(sum(ks), n) * 4).to(torch.float8_e4m3fn), torch.exp2(torch.randint(-3, 4, (4, n)).float()))
    layout = torch.tensor([32, 128], dtype=torch.int32)  # psum end rows, the same on both paths
    d = torch.randn(2, m, n)
    want = d.clone()
    served = []
    monkeypatch.setattr(_dispatch.TABLE, "run", lambda name, device, *args: served.append(
        _dispatch.TABLE.serves(name, device, *args)) or type(_dispatch.TABLE).run(_dispatch.TABLE, name, device, *args))
    deep_gemm.k_grouped_fp8_gemm_tn_contiguous(a, b, d, ks, layout, c=d, recipe=(1, 1, 32), use_psum_layout=True)
    assert served == ["ascend"]
    monkeypatch.setenv("DG_BACKEND", "reference")
    deep_gemm.k_grouped_fp8_gemm_tn_contiguous(a, b, want, ks, layout, c=want, recipe=(1, 1, 32), use_psum_layout=True)
    assert calc_diff(d, want) < 1e-5


def test_mxfp8_mqa_logits_in_deepgemm_ascend_form_runs_the_ascend_kernel(monkeypatch):
    """DeepGEMM-Ascend's lightning-indexer form: MXFP8 q and KV, per-32 UE8M0 scales packed in int16
    ([S, H, D/64] and [S_kv, D/64]), BF16 weights and logits."""
    monkeypatch.setenv("DG_BACKEND", "ascend")
    s, s_kv, heads, d = 3, 70, 64, 64  # the lowering of test_mqa_logits.py::test_mxfp8_forms[3-90-64-64-..]
    q = (torch.randn(s, heads, d) * 4).to(torch.float8_e4m3fn)
    kv = (torch.randn(s_kv, d) * 4).to(torch.float8_e4m3fn)
    sf_q, scale_q = _ascend_sf(s * heads, d)
    sf_kv, scale_kv = _ascend_sf(s_kv, d)
    weights = torch.randn(s, heads).bfloat16()
    ks, ke = torch.tensor([0, 10, 69], dtype=torch.int32), torch.tensor([70, 40, 70], dtype=torch.int32)
    query = deep_gemm.attention.Quantised(q, scale_q.view(s, heads, -1), False, False)
    key = deep_gemm.attention.Quantised(kv, scale_kv, False, False)
    logits_args = (query, key, weights, ks, ke, torch.empty(s, s_kv, dtype=torch.bfloat16), False, True)
    assert _dispatch.TABLE.serves("mqa_logits", q.device, *logits_args) == "ascend"
    got = deep_gemm.fp8_fp4_mqa_logits((q, sf_q.contiguous().view(s, heads, -1)), (kv, sf_kv.contiguous()), weights,
                                       ks, ke, logits_dtype=torch.bfloat16)
    scores = torch.einsum("shd,nd->shn", query.dequantized(), key.dequantized()).relu()
    want = torch.einsum("shn,sh->sn", scores, weights.float())
    inside = (torch.arange(s_kv)[None] >= ks[:, None]) & (torch.arange(s_kv)[None] < ke[:, None])
    assert torch.equal(torch.isinf(got), ~inside)
    assert calc_diff(got[inside].float(), want[inside]) < 1e-3


def test_each_mqa_logits_form_names_its_backend(monkeypatch):
    """Per MQA logits form, the backend the table picks on the Ascend path (the kernels' own tests run them)."""
    from deep_gemm.attention import PagedKV, Quantised
    monkeypatch.setenv("DG_BACKEND", "ascend")
    e4m3 = torch.float8_e4m3fn
    q8, kv8 = torch.zeros(2, 4, 64, dtype=e4m3), torch.zeros(40, 64, dtype=e4m3)
    q4, kv4 = torch.zeros(2, 4, 32, dtype=torch.int8), torch.zeros(40, 32, dtype=torch.int8)
    per32_q, per32_kv, per_token = torch.ones(2, 4, 2), torch.ones(40, 2), torch.ones(40)
    ranges = (torch.zeros(2, dtype=torch.int32), torch.full((2,), 40, dtype=torch.int32))
    forms = {"unscaled q, per-token KV": (Quantised(q8, None, False, False), Quantised(kv8, per_token, False, True)),
             "MXFP8 q and KV": (Quantised(q8, per32_q, False, False), Quantised(kv8, per32_kv, False, False)),
             "MXFP8 q, per-token KV": (Quantised(q8, per32_q, False, False), Quantised(kv8, per_token, False, True)),
             "unscaled q, MXFP8 KV": (Quantised(q8, None, False, False), Quantised(kv8, per32_kv, False, False)),
             "FP4 q and KV": (Quantised(q4, per32_q, True, False), Quantised(kv4, per32_kv, True, False))}
    for form, (q, kv) in forms.items():
        served = _dispatch.TABLE.serves("mqa_logits", q8.device, q, kv, torch.ones(2, 4), *ranges,
                                        torch.empty(2, 40), False, True)
        assert served == "ascend", form
    wide = Quantised(torch.zeros(2, 129, 64, dtype=e4m3), None, False, False)
    assert _dispatch.TABLE.serves("mqa_logits", q8.device, wide, forms["unscaled q, per-token KV"][1],
                                  torch.ones(2, 129), *ranges, torch.empty(2, 40), False, True) == "reference"
    paged_q8 = torch.zeros(1, 1, 4, 64, dtype=e4m3)
    mx_q = Quantised(paged_q8, torch.ones(1, 1, 4, 2), False, False)
    paged = {"unscaled q, NVIDIA FP8 cache": (Quantised(paged_q8, None, False, False),
                                              PagedKV(torch.zeros(2, 64, 1, 68, dtype=torch.uint8), False, 64)),
             "MXFP8, rows layout": (mx_q, PagedKV(torch.zeros(2, 64, 1, 66, dtype=torch.uint8), False, 64, True)),
             "MXFP8, use_ascend_kv_layout": (mx_q, PagedKV(torch.zeros(2, 64, 1, 66, dtype=torch.uint8), False, 64,
                                                           True, True)),
             "FP4": (Quantised(torch.zeros(1, 1, 4, 32, dtype=torch.int8), torch.ones(1, 1, 4, 2), True, False),
                     PagedKV(torch.zeros(2, 64, 1, 36, dtype=torch.uint8), True, 64)),
             "scaled FP8 q, NVIDIA FP8 cache": (mx_q, PagedKV(torch.zeros(2, 64, 1, 68, dtype=torch.uint8), False, 64))}
    lens, table = torch.ones(1, 1, dtype=torch.int32), torch.zeros(1, 2, dtype=torch.int32)
    for form, (q, kv) in paged.items():
        served = _dispatch.TABLE.serves("paged_mqa_logits", q.data.device, q, kv, torch.ones(1, 4), lens, table,
                                        torch.empty(1, 64), True)
        assert served == "ascend", form
    # unreachable through the public ops (the MX cache comes with per-32 query scales), so left on the reference
    unscaled_mx = (Quantised(paged_q8, None, False, False),
                   PagedKV(torch.zeros(2, 64, 1, 66, dtype=torch.uint8), False, 64, True))
    assert _dispatch.TABLE.serves("paged_mqa_logits", q8.device, *unscaled_mx, torch.ones(1, 4), lens, table,
                                  torch.empty(1, 64), True) == "reference"
