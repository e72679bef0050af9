"""This machine's ceilings, measured in the benchmark run: torch BF16 matmul, the BF16
dot-product and FP32 FMA instruction peaks (register-only kernels via deepjit's host toolchain)
and copy bandwidth."""
from __future__ import annotations

import os
import time

import torch

_PEAK_SOURCE = r"""
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>
#include <immintrin.h>

// Register-only loop: 16 independent accumulators so the dot-product unit never waits on a
// dependency. Returns FLOPs executed per thread through `flops`.
DJ_KERNEL(bf16_peak, "ptr,i64,i64") void bf16_peak(double* sink, int64_t iters, int64_t threads) {
    dj::parallel_threads(threads, [&](int64_t t, int64_t) {
#if defined(__AVX512BF16__)
        __m512 acc[16];
        for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
        const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3F80), b = (__m512bh)_mm512_set1_epi16(0x3C00);
        for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
        }
        __m512 s = acc[0];
        for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
        sink[t] = _mm512_reduce_add_ps(s);
#else
        // No BF16 dot product: FP32 FMA peak counted the same way (2 flops per lane per FMA).
        __m256 acc[12];
        for (int i = 0; i < 12; ++i) acc[i] = _mm256_setzero_ps();
        const __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-3f);
        for (int64_t it = 0; it < iters; ++it)
            for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
        float out[8]; _mm256_storeu_ps(out, acc[0]); sink[t] = out[0];
#endif
    });
}
"""


_FP32_PEAK_SOURCE = r"""
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>
#include <immintrin.h>

// Register-only FMA loop, 16 independent accumulators of the widest vector the CPU has.
DJ_KERNEL(fp32_peak, "ptr,i64,i64") void fp32_peak(double* sink, int64_t iters, int64_t threads) {
    dj::parallel_threads(threads, [&](int64_t t, int64_t) {
#if defined(__AVX512F__)
        __m512 acc[16];
        for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
        const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-3f);
        for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
        }
        __m512 s = acc[0];
        for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
        sink[t] = _mm512_reduce_add_ps(s);
#else
        __m256 acc[16];
        for (int i = 0; i < 16; ++i) acc[i] = _mm256_setzero_ps();
        const __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-3f);
        for (int64_t it = 0; it < iters; ++it)
            for (int i = 0; i < 16; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
        float out[8]; _mm256_storeu_ps(out, acc[0]); sink[t] = out[0];
#endif
    });
}
"""


def _best(fn, warmup=2, reps=7) -> float:
    """Shortest of ``reps`` timed calls: a ceiling is what the machine can do, so other processes'
    load is filtered out rather than averaged in."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def torch_bf16_matmul_gflops(m=4096, n=7168, k=2048) -> float:
    a = torch.randn(m, k).bfloat16()
    b = torch.randn(k, n).bfloat16()
    return 2 * m * n * k / _best(lambda: a @ b, warmup=1, reps=3) / 1e9


def copy_bandwidth_gbs(nbytes=512 << 20) -> float:
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    return 2 * nbytes / _best(lambda: dst.copy_(src)) / 1e9


def _cpu_flags() -> str:
    return open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""


def _register_loop_gflops(name: str, source: str, flops_per_iter: int) -> float:
    import deepjit
    root = os.path.dirname(os.path.abspath(__file__))
    runtime = deepjit.Runtime(deepjit.Config(root, "BENCH"), "host")
    kernel = runtime.compile(name, source)
    threads = os.cpu_count() or 1
    sink = torch.zeros(threads, dtype=torch.float64)
    iters = 2_000_000
    seconds = _best(lambda: kernel(sink, iters, threads), warmup=1, reps=5)
    return threads * iters * flops_per_iter / seconds / 1e9


def bf16_instruction_peak_gflops() -> float:
    # lanes x (2 products + 2 adds) per dpbf16; without it the FP32 FMA loop of the same source
    flops_per_iter = 16 * 16 * 2 * 2 if "avx512_bf16" in _cpu_flags() else 12 * 8 * 2
    return _register_loop_gflops("bf16_peak", _PEAK_SOURCE, flops_per_iter)


def fp32_fma_peak_gflops() -> float:
    lanes = 16 if "avx512f" in _cpu_flags() else 8
    return _register_loop_gflops("fp32_peak", _FP32_PEAK_SOURCE, 16 * lanes * 2)


MEASURES = {
    "torch_bf16_gflops": torch_bf16_matmul_gflops,
    "bf16_peak_gflops": bf16_instruction_peak_gflops,
    "fp32_peak_gflops": fp32_fma_peak_gflops,
    "copy_gbs": copy_bandwidth_gbs,
}


class Peaks:
    """Measured once per benchmark session, on first use, and again at its end (``remeasure``):
    a ceiling is a property of the machine that load can only lower, so the higher of the two
    readings is kept and a large gap is reported as a loaded run."""

    def __init__(self):
        self._values: dict[str, float] = {}
        self.first: dict[str, float] = {}

    def _get(self, name: str) -> float:
        if name not in self._values:
            self._values[name] = self.first[name] = MEASURES[name]()
        return self._values[name]

    def remeasure(self) -> list[str]:
        """Measures every ceiling used so far once more; returns a warning per ceiling whose two
        readings differ by more than 15 %."""
        warnings = []
        for name in list(self._values):
            again = MEASURES[name]()
            if abs(again - self.first[name]) > 0.15 * max(again, self.first[name]):
                warnings.append(f"{name}: {self.first[name]:.1f} at the start, {again:.1f} at the end")
            self._values[name] = max(self._values[name], again)
        return warnings

    @property
    def torch_bf16_gflops(self) -> float:
        return self._get("torch_bf16_gflops")

    @property
    def bf16_peak_gflops(self) -> float:
        return self._get("bf16_peak_gflops")

    @property
    def fp32_peak_gflops(self) -> float:
        return self._get("fp32_peak_gflops")

    @property
    def copy_gbs(self) -> float:
        return self._get("copy_gbs")

    def as_dict(self) -> dict:
        return dict(self._values)
