"""This machine's ceilings, measured in the benchmark run: torch BF16 matmul, the BF16
dot-product instruction peak (register-only kernel via deepjit's host toolchain) and copy bandwidth."""
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


def _bench(fn, warmup=2, reps=7) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def torch_bf16_matmul_gflops(m=4096, n=7168, k=2048) -> float:
    a = torch.randn(m, k).bfloat16()
    b = torch.randn(k, n).bfloat16()
    return 2 * m * n * k / _bench(lambda: a @ b, warmup=1, reps=3) / 1e9


def copy_bandwidth_gbs(nbytes=512 << 20) -> float:
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    return 2 * nbytes / _bench(lambda: dst.copy_(src)) / 1e9


def bf16_instruction_peak_gflops() -> float:
    import deepjit
    root = os.path.dirname(os.path.abspath(__file__))
    runtime = deepjit.Runtime(deepjit.Config(root, "BENCH"), "host")
    kernel = runtime.compile("bf16_peak", _PEAK_SOURCE)
    threads = os.cpu_count() or 1
    sink = torch.zeros(threads, dtype=torch.float64)
    iters = 2_000_000
    seconds = _bench(lambda: kernel(sink, iters, threads), warmup=1, reps=5)
    has_bf16 = "avx512_bf16" in open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else False
    flops_per_iter = 16 * 16 * 2 * 2 if has_bf16 else 12 * 8 * 2  # lanes x (2 products + 2 adds) per dpbf16
    return threads * iters * flops_per_iter / seconds / 1e9


class Peaks:
    """Measured once per benchmark session, on first use."""

    def __init__(self):
        self._values: dict[str, float] = {}

    def _get(self, name, fn):
        if name not in self._values:
            self._values[name] = fn()
        return self._values[name]

    @property
    def torch_bf16_gflops(self) -> float:
        return self._get("torch_bf16_gflops", torch_bf16_matmul_gflops)

    @property
    def bf16_peak_gflops(self) -> float:
        return self._get("bf16_peak_gflops", bf16_instruction_peak_gflops)

    @property
    def copy_gbs(self) -> float:
        return self._get("copy_gbs", copy_bandwidth_gbs)

    def as_dict(self) -> dict:
        return dict(self._values)
