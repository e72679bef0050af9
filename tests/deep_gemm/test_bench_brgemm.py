"""The deep_gemm host GEMMs on the brgemm matrix engine (oneDNN's micro-kernel from torch, AMX tiles
where the CPU has them) against torch's BF16 matmul and against the same op on the best other
engine this CPU has (avx512bf16 or fma), each pair timed interleaved in the same run (Bench.paired:
other processes' load slows both sides of a ratio or neither). The share column is of the brgemm
peak measured in this run (loops of brgemm calls on one cache-resident tile, the best of a few tile
shapes, testkit/peaks.py).

Targets (issue 34): BF16/FP8 prefill >= 1.0x torch BF16 at 4096x7168x2048 and 4096x4096x7168;
FP8 at M = 64 >= 1.0x; FP8 at M = 4 >= 1.5x torch BF16 (half the bytes); no op slower than on
its previous engine (ratio vs the other engine >= 1.0).

K-grouped (weight gradients, MN-major operands, FP32 d accumulated in place): 4 groups of
7168x2048 outputs over 10240 K in all, against torch's BF16 matmul of the same FLOPs
(7168x2048x10240) and the same op on the other engine."""
import importlib

import pytest
import torch

from deep_gemm import host as H
from deep_gemm._lib import LIB
from deepjit.backends.host import HostCompilerOptions
from deepjit.backends.host import matrix_engine as me
from tests.testkit.bench_plugin import Bench
from tests.testkit.peaks import bf16_engine, cpu_flags

pytestmark = pytest.mark.bench
GEMM_MODULE = importlib.import_module("deep_gemm.host.gemm")   # H.gemm is the function of that name

CASES = [("bf16", 4096, 7168, 2048), ("bf16", 4096, 4096, 7168), ("fp8", 4096, 7168, 2048),
         ("fp8", 4096, 4096, 7168), ("fp8 fp32-sf", 4096, 7168, 2048), ("fp8", 64, 7168, 2048),
         ("fp8", 4, 7168, 2048), ("bf16", 4, 7168, 2048)]


def _require_brgemm() -> None:
    if me.unavailable("brgemm", cpu_flags(), "DJ_HOST_MATRIX") or bf16_engine() != "brgemm":
        pytest.skip("measures the brgemm engine: run where it is available, without forcing another engine")


def _other_engine() -> str:
    return next(e for e in me.present_engines(cpu_flags()) if e != "brgemm")


def _on_engine(engine: str):
    """deep_gemm's host-kernel getter, building on ``engine`` whatever this process defaults to."""
    options = HostCompilerOptions(matrix_engine=engine)
    return lambda name, path, defines=None, engine=None: LIB.host_kernel(name, path, defines, options)


def _operands(kind, m, n, k):
    g = torch.Generator().manual_seed(m + n + k)
    if kind == "bf16":
        return torch.randn(m, k, generator=g).bfloat16(), None, torch.randn(n, k, generator=g).bfloat16(), None
    a = torch.randn(m, k, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=g).to(torch.float8_e4m3fn)
    sfa = torch.exp2(torch.randint(-8, -4, (m, -(-k // 128)), generator=g).float())
    sfb = torch.exp2(torch.randint(-8, -4, (-(-n // 128), -(-k // 128)), generator=g).float())
    if kind == "fp8 fp32-sf":   # non-power-of-two scales: promoted in FP32 per 128-K block
        sfa = sfa * 1.3
    return a, sfa, b, sfb


def _record_against_torch_and_other(bench, label, shape, flops, run, ours, other, m, n, k, reps):
    """Times run(ours) paired with torch's BF16 matmul of an m x n x k problem, then with run(other)."""
    ab, bt = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16().T
    out = torch.empty(m, n, dtype=torch.bfloat16)
    t, t0 = Bench.paired(lambda: run(ours), lambda: torch.matmul(ab, bt, out=out), reps)
    bench.record("deep_gemm", label, shape, t, flops=flops, baseline="torch bf16 matmul", baseline_seconds=t0)
    t, t1 = Bench.paired(lambda: run(ours), lambda: run(other), reps)
    bench.record("deep_gemm", label, shape, t, flops=flops, baseline=f"same op on {_other_engine()}",
                 baseline_seconds=t1)


@pytest.mark.parametrize("kind,m,n,k", CASES)
def test_bench_brgemm_gemm(bench, monkeypatch, kind, m, n, k):
    _require_brgemm()
    a, sfa, b, sfb = _operands(kind, m, n, k)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    ours, other = _on_engine("brgemm"), _on_engine(_other_engine())

    def run(getter):
        GEMM_MODULE.kernel = getter
        H.gemm(a, sfa, b, sfb, d)

    monkeypatch.setattr(GEMM_MODULE, "kernel", ours)
    reps = 3 if m >= 1024 else 60   # decode calls take ~2 ms: more pairs filter the load out
    _record_against_torch_and_other(bench, f"{kind} gemm on brgemm", f"{m}x{n}x{k}", 2 * m * n * k, run, ours,
                                    other, m, n, k, reps)


KG_CASES = [("bf16", 7168, 2048, (2048, 2560, 3072, 2560)), ("fp8", 7168, 2048, (2048, 2560, 3072, 2560)),
            ("fp8 fp32-sf", 7168, 2048, (2048, 2560, 3072, 2560))]


def _k_grouped_operands(kind, m, n, ks):
    """a [sum_K, M], b [sum_K, N] and per-channel scales per group's 128-K block ([S, M|N])."""
    g, total, blocks = torch.Generator().manual_seed(m + n + len(ks)), sum(ks), sum(-(-k // 128) for k in ks)
    if kind == "bf16":
        return torch.randn(total, m, generator=g).bfloat16(), None, torch.randn(total, n, generator=g).bfloat16(), None
    a = torch.randn(total, m, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(total, n, generator=g).to(torch.float8_e4m3fn)
    sfa = torch.exp2(torch.randint(-8, -4, (blocks, m), generator=g).float())
    sfb = torch.exp2(torch.randint(-8, -4, (blocks, n), generator=g).float())
    if kind == "fp8 fp32-sf":   # non-power-of-two scales (SM90's recipe): promoted in FP32 per 128-K block
        sfa = sfa * 1.3
    return a, sfa, b, sfb


@pytest.mark.parametrize("kind,m,n,ks", KG_CASES)
def test_bench_brgemm_k_grouped(bench, monkeypatch, kind, m, n, ks):
    _require_brgemm()
    a, sfa, b, sfb = _k_grouped_operands(kind, m, n, ks)
    d = torch.zeros(len(ks), m, n)
    total = sum(ks)
    ours, other = _on_engine("brgemm"), _on_engine(_other_engine())

    def run(getter):
        GEMM_MODULE.kernel = getter
        H.k_grouped_gemm(a, sfa, b, sfb, d, d, ks)

    monkeypatch.setattr(GEMM_MODULE, "kernel", ours)
    _record_against_torch_and_other(bench, f"{kind} k_grouped on brgemm", f"{m}x{n}x{total} ({len(ks)} groups)",
                                    2 * m * n * total, run, ours, other, m, n, total, 3)
