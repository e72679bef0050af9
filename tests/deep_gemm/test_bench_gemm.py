"""Speed of the host GEMMs against torch in the same run (DeepSeek-V3 projection shapes).

Targets (issue 4): FP8 prefill >= 1.0x torch BF16 matmul; FP8 decode time <= 0.6x torch BF16;
FP8 >= 5x torch._scaled_mm; BF16 >= 1.1x torch BF16; grouped >= 0.8x dense FP8 at equal rows.
On this machine the BF16 instruction peak caps the first three below their targets where torch
is already near that peak (decode M=64 is compute-bound here: 2*M FLOPs per weight byte).

Op and baseline are timed alternately, best of each (Bench.paired)."""
import pytest
import torch

import deep_gemm
from deep_gemm import host as H
from tests.testkit.bench_plugin import Bench

SHAPES = [(7168, 2048), (2112, 7168), (4096, 7168), (7168, 2304)]
pytestmark = pytest.mark.bench


def fp8_operands(m, n, k):
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn)
    sfa = torch.exp2(torch.randint(-8, -4, (m, -(-k // 128))).float())
    sfb = torch.exp2(torch.randint(-8, -4, (-(-n // 128), -(-k // 128))).float())
    return a, sfa, b, sfb


def _reps(m):
    return 3 if m >= 1024 else 15


@pytest.mark.parametrize("m", [4096, 64])
@pytest.mark.parametrize("n,k", SHAPES)
def test_bench_fp8_gemm(bench, m, n, k):
    a, sfa, b, sfb = fp8_operands(m, n, k)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    ab, bb = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16()
    flops = 2 * m * n * k
    t, t0 = Bench.paired(lambda: H.gemm(a, sfa, b, sfb, d), lambda: ab @ bb.T, _reps(m))
    bench.record("deep_gemm", "fp8_gemm_nt (pow2 sf)", f"{m}x{n}x{k}", t, flops=flops,
                 baseline="torch bf16 matmul", baseline_seconds=t0)
    if m == 4096 and n == 7168 and k == 2048:
        sfa_f = sfa * 1.3   # non-power-of-two scales: promoted per 128-K block
        tf, t0 = Bench.paired(lambda: H.gemm(a, sfa_f, b, sfb, d), lambda: ab @ bb.T, _reps(m))
        bench.record("deep_gemm", "fp8_gemm_nt (fp32 sf)", f"{m}x{n}x{k}", tf, flops=flops,
                     baseline="torch bf16 matmul", baseline_seconds=t0)
        one, bt = torch.tensor(1.0), b.T
        t, ts = Bench.paired(lambda: H.gemm(a, sfa, b, sfb, d),
                       lambda: torch._scaled_mm(a, bt, one, one, out_dtype=torch.bfloat16), 1)
        bench.record("deep_gemm", "fp8_gemm_nt vs _scaled_mm", f"{m}x{n}x{k}", t, flops=flops,
                     baseline="torch._scaled_mm tensor-wise", baseline_seconds=ts)
    if m == 64 and n == 7168 and k == 2048:
        # Python cost of the public API path: the same call through deep_gemm.fp8_gemm_nt.
        tp, th = Bench.paired(lambda: deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d), lambda: H.gemm(a, sfa, b, sfb, d), 30)
        bench.record("deep_gemm", "fp8_gemm_nt public API", f"{m}x{n}x{k}", tp,
                     baseline="host entry point, same call", baseline_seconds=th)


@pytest.mark.parametrize("m,n,k", [(4096, 7168, 2048), (64, 7168, 2048)])
def test_bench_bf16_gemm(bench, m, n, k):
    a, b = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16()
    d = torch.empty(m, n, dtype=torch.bfloat16)
    t, t0 = Bench.paired(lambda: H.gemm(a, None, b, None, d), lambda: a @ b.T, _reps(m))
    bench.record("deep_gemm", "bf16_gemm_nt", f"{m}x{n}x{k}", t, flops=2 * m * n * k,
                 baseline="torch bf16 matmul", baseline_seconds=t0)


@pytest.mark.parametrize("n,k", [(4096, 7168), (7168, 2048)])
def test_bench_grouped(bench, n, k):
    g, rows = 8, 512
    m = g * rows
    a, sfa, _, _ = fp8_operands(m, n, k)
    b = torch.randn(g, n, k).to(torch.float8_e4m3fn)
    sfb = torch.exp2(torch.randint(-8, -4, (g, -(-n // 128), -(-k // 128))).float())
    d = torch.empty(m, n, dtype=torch.bfloat16)
    m_indices = torch.arange(g, dtype=torch.int32).repeat_interleave(rows)
    dense = lambda: H.gemm(a, sfa, b[0], sfb[0], d)   # noqa: E731
    tc, td = Bench.paired(lambda: H.m_grouped_gemm_contiguous(a, sfa, b, sfb, d, m_indices), dense, 2)
    bench.record("deep_gemm", "m_grouped_fp8 contiguous", f"{g}x{rows}x{n}x{k}", tc, flops=2 * m * n * k,
                 baseline="host dense fp8, same rows", baseline_seconds=td)
    am, sfam, dm = a.view(g, rows, k), sfa.view(g, rows, -1), d.view(g, rows, n)
    masked = torch.full((g,), rows, dtype=torch.int32)
    tm, td = Bench.paired(lambda: H.m_grouped_gemm_masked(am, sfam, b, sfb, dm, masked), dense, 2)
    bench.record("deep_gemm", "m_grouped_fp8 masked", f"{g}x{rows}x{n}x{k}", tm, flops=2 * m * n * k,
                 baseline="host dense fp8, same rows", baseline_seconds=td)
