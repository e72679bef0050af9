"""Benchmarks of deep_gemm's Ascend kernels on an Ascend 950 (make bench, NPU only): TFLOP/s against the
published Ascend 950 figures (issue 12) -- BF16 431 TFLOP/s, FP8 861, FP4 1701 at the published GEMM
shape, M-grouped psum GEMMs against the dense
figures at the same FLOPs, MQA logits 681 in prefill (4096 queries x 8192 KV) and 565 in decode (256 queries; paged decode against the same figure), 32 heads x 128.
Timed with NPU events around the launches (median of repeats after a warm-up)."""
import pytest
import torch

import deep_gemm
from tests.deep_gemm.ascend._grouped import psum_ends
from tests.deep_gemm.ascend.test_paged_mqa_logits import _inputs as _paged_inputs
from tests.deep_gemm.ascend.test_served_through_table import _ascend_sf
from tests.testkit.npu import npu_seconds

pytestmark = [pytest.mark.bench, pytest.mark.npu]
NPU = "npu"
GEMM_SHAPE = (4096, 7168, 4096)
TARGET_TFLOPS = {"bf16": 431.0, "fp8": 861.0, "fp4": 1701.0, "mqa prefill": 681.0, "mqa decode": 565.0}


def _record(bench, case, shape, seconds, flops, target):
    bench.record("deep_gemm", f"ascend {case}", shape, seconds, flops=flops,
                 baseline=f"published Ascend 950 ({target:.0f} TFLOP/s)", baseline_seconds=flops / (target * 1e12))


def test_bf16_gemm_speed(bench):
    m, n, k = GEMM_SHAPE
    a, b = torch.randn(m, k).bfloat16().to(NPU), torch.randn(n, k).bfloat16().to(NPU)
    d = torch.empty(m, n, dtype=torch.bfloat16).to(NPU)
    seconds = npu_seconds(lambda: deep_gemm.bf16_gemm_nt(a, b, d))
    _record(bench, "bf16_gemm_nt", f"{m}x{n}x{k}", seconds, 2 * m * n * k, TARGET_TFLOPS["bf16"])


def _quant(mn, k, fp4):
    if fp4:
        data = torch.randint(0, 256, (mn, k // 2), dtype=torch.uint8).view(torch.int8)
    else:
        data = (torch.randn(mn, k) * 4).to(torch.float8_e4m3fn)
    return data.to(NPU), _ascend_sf(mn, k).to(NPU)


@pytest.mark.parametrize("kind", ["fp8", "fp4"])
def test_mx_gemm_speed(bench, kind):
    m, n, k = GEMM_SHAPE
    a, b = _quant(m, k, kind == "fp4"), _quant(n, k, kind == "fp4")
    d = torch.empty(m, n, dtype=torch.bfloat16).to(NPU)
    seconds = npu_seconds(lambda: deep_gemm.fp8_fp4_gemm_nt(a, b, d, recipe=(1, 1, 32)))
    _record(bench, f"{kind}_gemm_nt", f"{m}x{n}x{k}", seconds, 2 * m * n * k, TARGET_TFLOPS[kind])


@pytest.mark.parametrize(("phase", "s"), [("prefill", 4096), ("decode", 256)])
def test_mqa_logits_speed(bench, phase, s):
    s_kv, heads, head_dim = 8192, 32, 128
    q = torch.randn(s, heads, head_dim).to(torch.float8_e4m3fn).to(NPU)
    kv = (torch.randn(s_kv, head_dim).to(torch.float8_e4m3fn).to(NPU), (torch.rand(s_kv) + 0.5).to(NPU))
    weights = torch.randn(s, heads).to(NPU)
    ks = torch.zeros(s, dtype=torch.int32).to(NPU)
    ke = torch.full((s,), s_kv, dtype=torch.int32).to(NPU)   # every query sees the whole KV: FLOPs are exact
    seconds = npu_seconds(lambda: deep_gemm.fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=False))
    _record(bench, f"mqa_logits {phase}", f"s{s} skv{s_kv} h{heads}x{head_dim}", seconds,
            2 * s * s_kv * heads * head_dim, TARGET_TFLOPS[f"mqa {phase}"])


@pytest.mark.parametrize("kind", ["bf16", "fp8"])
def test_m_grouped_psum_speed(bench, kind):
    groups, rows, n, k = 8, 1024, 4096, 7168   # 8 experts x 1024 tokens, aligned: every row computed
    m = groups * rows
    ends = psum_ends([rows] * groups, deep_gemm.get_mk_alignment_for_contiguous_layout()).to(NPU)
    d = torch.empty(m, n, dtype=torch.bfloat16).to(NPU)
    if kind == "bf16":
        a, b = torch.randn(m, k).bfloat16().to(NPU), torch.randn(groups, n, k).bfloat16().to(NPU)
        fn = lambda: deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ends, use_psum_layout=True)  # noqa: E731
    else:
        a = _quant(m, k, False)
        parts = [_quant(n, k, False) for _ in range(groups)]
        b = (torch.stack([p[0] for p in parts]), torch.stack([p[1].t() for p in parts]).transpose(1, 2))
        fn = lambda: deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous(  # noqa: E731
            a, b, d, ends, recipe=(1, 1, 32), use_psum_layout=True)
    _record(bench, f"m_grouped_{kind}_psum", f"{groups}x{rows}x{n}x{k}", npu_seconds(fn), 2 * m * n * k,
            TARGET_TFLOPS[kind])


def test_paged_mqa_logits_decode_speed(bench):
    batch, heads, head_dim, block_kv, ctx = 256, 32, 128, 64, 8192
    q, kv, weights, table = _paged_inputs(batch, 1, heads, head_dim, block_kv, ctx)
    lens = torch.full((batch, 1), ctx, dtype=torch.int32).to(NPU)   # every row sees the whole context
    q, cache, weights, table = q.data.to(NPU), kv.cache.to(NPU), weights.to(NPU), table.to(NPU)
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, deep_gemm.get_num_sms())
    seconds = npu_seconds(lambda: deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, table, meta, ctx))
    _record(bench, "paged_mqa_logits decode", f"b{batch} ctx{ctx} h{heads}x{head_dim}", seconds,
            2 * batch * ctx * heads * head_dim, TARGET_TFLOPS["mqa decode"])
