"""Benchmarks of deep_gemm's Ascend kernels on an Ascend 950 (make bench, NPU only): TFLOP/s against the
published Ascend 950 figures (issue 12) -- BF16 431 TFLOP/s, FP8 861, FP4 1701 at the published GEMM
shape, MQA logits 681 in prefill (4096 queries x 8192 KV) and 565 in decode (256 queries), 32 heads x 128.
Timed with NPU events around the launches (median of repeats after a warm-up)."""
import pytest
import torch

import deep_gemm
from tests.deep_gemm.ascend.test_served_through_table import _ascend_sf

pytestmark = [pytest.mark.bench, pytest.mark.npu]
NPU = "npu"
GEMM_SHAPE = (4096, 7168, 4096)
TARGET_TFLOPS = {"bf16": 431.0, "fp8": 861.0, "fp4": 1701.0, "mqa prefill": 681.0, "mqa decode": 565.0}


def _npu_seconds(fn, warmup: int = 3, reps: int = 20) -> float:
    """Median device time of ``fn`` in seconds, between NPU events on the current stream."""
    for _ in range(warmup):
        fn()
    torch.npu.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def _record(bench, case, shape, seconds, flops, target):
    bench.record("deep_gemm", f"ascend {case}", shape, seconds, flops=flops,
                 baseline=f"published Ascend 950 ({target:.0f} TFLOP/s)", baseline_seconds=flops / (target * 1e12))


def test_bf16_gemm_speed(bench):
    m, n, k = GEMM_SHAPE
    a, b = torch.randn(m, k).bfloat16().to(NPU), torch.randn(n, k).bfloat16().to(NPU)
    d = torch.empty(m, n, dtype=torch.bfloat16).to(NPU)
    seconds = _npu_seconds(lambda: deep_gemm.bf16_gemm_nt(a, b, d))
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
    seconds = _npu_seconds(lambda: deep_gemm.fp8_fp4_gemm_nt(a, b, d, recipe=(1, 1, 32)))
    _record(bench, f"{kind}_gemm_nt", f"{m}x{n}x{k}", seconds, 2 * m * n * k, TARGET_TFLOPS[kind])


@pytest.mark.parametrize(("phase", "s"), [("prefill", 4096), ("decode", 256)])
def test_mqa_logits_speed(bench, phase, s):
    s_kv, heads, head_dim = 8192, 32, 128
    q = torch.randn(s, heads, head_dim).to(torch.float8_e4m3fn).to(NPU)
    kv = (torch.randn(s_kv, head_dim).to(torch.float8_e4m3fn).to(NPU), (torch.rand(s_kv) + 0.5).to(NPU))
    weights = torch.randn(s, heads).to(NPU)
    ks = torch.zeros(s, dtype=torch.int32).to(NPU)
    ke = torch.full((s,), s_kv, dtype=torch.int32).to(NPU)   # every query sees the whole KV: FLOPs are exact
    seconds = _npu_seconds(lambda: deep_gemm.fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=False))
    _record(bench, f"mqa_logits {phase}", f"s{s} skv{s_kv} h{heads}x{head_dim}", seconds,
            2 * s * s_kv * heads * head_dim, TARGET_TFLOPS[f"mqa {phase}"])
