"""This machine's ceilings, measured in the benchmark run: the peak of every host matrix engine
present (register-only loops via deepjit's host toolchain), torch BF16 matmul and copy bandwidth.

Engines (deepjit/backends/host/matrix_engine.py): ``avx512bf16`` is a vdpbf16ps loop, ``fma`` an FP32
FMA loop of the widest vector the CPU has (the fma engine's BF16 products are one FMA per
multiply-add, and FP32 kernels run on it too), ``brgemm`` loops of oneDNN brgemm calls on one
cache-resident BF16 tile, the best of a few tile shapes (AMX tiles where the CPU has them)."""
from __future__ import annotations

import functools
import os
import time

import torch

from deepjit.backends.host import cpu_identity
from deepjit.backends.host import matrix_engine as me
from deepjit.env import Env

_AVX512BF16_LOOP = r"""
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>
#include <immintrin.h>

// Register-only vdpbf16ps loop: 16 independent accumulators so the unit never waits on a dependency.
DJ_KERNEL(avx512bf16_peak, "ptr,i64,i64") void avx512bf16_peak(double* sink, int64_t iters, int64_t threads) {
    dj::parallel_threads(threads, [&](int64_t t, int64_t) {
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
    });
}
"""

_FMA_LOOP = r"""
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>
#include <immintrin.h>

// Register-only FMA loop, independent accumulators of the widest vector the CPU has.
DJ_KERNEL(fma_peak, "ptr,i64,i64") void fma_peak(double* sink, int64_t iters, int64_t threads) {
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
        // 12 accumulators: with the two operands they fit AVX2's 16 registers (16 would spill)
        __m256 acc[12];
        for (int i = 0; i < 12; ++i) acc[i] = _mm256_setzero_ps();
        const __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-3f);
        for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
            for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
        }
        // every accumulator feeds the result: reading one alone lets the compiler drop the other
        // chains, leaving one latency-bound chain counted as many
        __m256 s = acc[0];
        for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
        float out[8]; _mm256_storeu_ps(out, s); sink[t] = out[0];
#endif
    });
}
"""


_BRGEMM_LOOP = r"""
#include <deepjit/host/brgemm.hpp>
#include <deepjit/host/parallel.hpp>
#include <cstdlib>

// One L1/L2-resident m x n x k tile per thread, C += A . B over and over: the micro-kernel's own
// ceiling at that tile. Operands are 64-byte aligned (AMX tile loads that split cache lines are slower).
DJ_KERNEL(brgemm_peak, "ptr,i64,i64,i64,i64,i64")
void brgemm_peak(double* sink, int64_t iters, int64_t threads, int64_t m, int64_t n, int64_t k) {
    dj::parallel_threads(threads, [&](int64_t t, int64_t) {
        dj::brgemm::Scope scope;
        const auto bytes = [](int64_t b) { return (size_t)(b + 63) / 64 * 64; };
        auto* a = static_cast<uint16_t*>(std::aligned_alloc(64, bytes(2 * m * k)));
        auto* b = static_cast<uint32_t*>(std::aligned_alloc(64, bytes(2 * k * n)));
        auto* c = static_cast<float*>(std::aligned_alloc(64, bytes(4 * m * n)));
        for (int64_t i = 0; i < m * k; ++i) a[i] = 0x3F80;
        for (int64_t i = 0; i < k / 2 * n; ++i) b[i] = 0x3C003C00u;
        for (int64_t i = 0; i < m * n; ++i) c[i] = 0.0f;
        for (int64_t it = 0; it < iters && !dj::failed(); ++it) dj::brgemm::gemm(m, n, k, a, k, b, n, c, n, it > 0);
        sink[t] = c[0];
        std::free(a);
        std::free(b);
        std::free(c);
    });
}
"""
# Tiles the brgemm peak is measured on; the ceiling is the best of them. oneDNN blocks each shape its
# own way and on AMX the readings differ by up to 2x between these tiles (measured on a Xeon with AMX:
# 32 x 32 x 512 at 0.8-1.6 TFLOP/s a core, 32 x 64 x 512 at 2.0), so one tile under-measures the engine
# and its kernels then read above 100 % of "peak".
BRGEMM_TILES = ((32, 32, 512), (32, 64, 512), (64, 32, 512), (64, 64, 256))


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


def cpu_flags() -> str:
    return cpu_identity()[1]


def bf16_engine() -> str:
    """The engine the libraries' BF16 kernels are built on in this process (as their runtimes choose
    it: DJ_HOST_MATRIX, else the best built engine the CPU has)."""
    env = Env("BENCH")
    return me.choose(env, cpu_flags(), env.get_str("JIT_HOST_MARCH", "native")).engine


def torch_bf16_matmul_gflops(m=4096, n=7168, k=2048) -> float:
    a = torch.randn(m, k).bfloat16()
    b = torch.randn(k, n).bfloat16()
    return 2 * m * n * k / _best(lambda: a @ b, warmup=1, reps=3) / 1e9


def copy_bandwidth_gbs(nbytes=512 << 20) -> float:
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    return 2 * nbytes / _best(lambda: dst.copy_(src)) / 1e9


def _compile_loop(name: str, source: str, engine: str):
    import deepjit
    from deepjit.backends.host import HostCompilerOptions
    root = os.path.dirname(os.path.abspath(__file__))
    runtime = deepjit.Runtime(deepjit.Config(root, "BENCH"), "host")
    # the loops name their instructions themselves: built on fma (brgemm: linked to torch) whatever
    # DJ_HOST_MATRIX forces
    return runtime.compile(name, source, HostCompilerOptions(matrix_engine=engine))


def _register_loop_gflops(name: str, source: str, flops_per_iter: int, engine: str = "fma",
                          iters: int = 2_000_000) -> float:
    kernel = _compile_loop(name, source, engine)
    threads = os.cpu_count() or 1
    sink = torch.zeros(threads, dtype=torch.float64)
    seconds = _best(lambda: kernel(sink, iters, threads), warmup=1, reps=5)
    return threads * iters * flops_per_iter / seconds / 1e9


def avx512bf16_peak_gflops() -> float:
    # 16 accumulators x 16 lanes x (2 products + 2 adds) per vdpbf16ps
    return _register_loop_gflops("avx512bf16_peak", _AVX512BF16_LOOP, 16 * 16 * 2 * 2)


def fma_peak_gflops() -> float:
    # accumulators x lanes x 2 flops per FMA: 16 x 16 on AVX-512, 12 x 8 on AVX2
    per_iter = 16 * 16 * 2 if "avx512f" in cpu_flags().split() else 12 * 8 * 2
    return _register_loop_gflops("fma_peak", _FMA_LOOP, per_iter)


def brgemm_tile_rate(kernel, threads: int, tile: tuple[int, int, int], flops_per_tile: float):
    """``(GFLOP/s, iterations, sink)`` of the compiled brgemm loop at one ``(m, n, k)`` tile, each thread
    running about ``flops_per_tile`` FLOP; ``sink[t]`` is C[0, 0] of thread t's tile after its last run."""
    m, n, k = tile
    iters = max(1, int(flops_per_tile / (2 * m * n * k)))
    sink = torch.zeros(threads, dtype=torch.float64)
    seconds = _best(functools.partial(kernel, sink, iters, threads, m, n, k), warmup=1, reps=5)
    return threads * iters * 2 * m * n * k / seconds / 1e9, iters, sink


def brgemm_peak_gflops(tiles=BRGEMM_TILES, flops_per_tile: float = 2e10) -> float:
    """The best of the tiles' loop rates (about ``flops_per_tile`` FLOP per thread each)."""
    kernel = _compile_loop("brgemm_peak", _BRGEMM_LOOP, "brgemm")
    threads = os.cpu_count() or 1
    return max(brgemm_tile_rate(kernel, threads, tile, flops_per_tile)[0] for tile in tiles)


# engine -> its peak loop; an engine present without a loop is reported unmeasured
ENGINE_LOOPS = {"brgemm": brgemm_peak_gflops, "avx512bf16": avx512bf16_peak_gflops, "fma": fma_peak_gflops}

MEASURES = {
    "torch_bf16_gflops": torch_bf16_matmul_gflops,
    "brgemm_peak_gflops": brgemm_peak_gflops,
    "avx512bf16_peak_gflops": avx512bf16_peak_gflops,
    "fma_peak_gflops": fma_peak_gflops,
    "copy_gbs": copy_bandwidth_gbs,
}


class Peaks:
    """Measured once per benchmark session, on first use, and again at its end (``remeasure``):
    a ceiling is a property of the machine that load can only lower, so the higher of the two
    readings is kept and a large gap is reported as a loaded run."""

    def __init__(self, flags: str | None = None):
        self._values: dict[str, float] = {}
        self.first: dict[str, float] = {}
        self.present = me.present_engines(cpu_flags() if flags is None else flags)

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

    def engine_peak_gflops(self, engine: str) -> float | None:
        """The engine's measured peak; None where the CPU lacks it or it has no loop (amx)."""
        if engine not in self.present or engine not in ENGINE_LOOPS:
            return None
        return self._get(f"{engine}_peak_gflops")

    def best_engine(self) -> tuple[str, float]:
        """The measured engine with the highest peak, and that peak."""
        peaks = {e: self.engine_peak_gflops(e) for e in self.present}
        return max(((e, p) for e, p in peaks.items() if p is not None), key=lambda ep: ep[1])

    def unmeasured(self) -> list[str]:
        return [f"{e}: present, not measured (no peak loop)" for e in self.present if e not in ENGINE_LOOPS]

    @property
    def torch_bf16_gflops(self) -> float:
        return self._get("torch_bf16_gflops")

    @property
    def bf16_peak_gflops(self) -> float:
        """The peak of the engine the BF16 kernels run on."""
        return self.engine_peak_gflops(bf16_engine())

    @property
    def fp32_peak_gflops(self) -> float:
        return self.engine_peak_gflops("fma")

    @property
    def copy_gbs(self) -> float:
        return self._get("copy_gbs")

    def as_dict(self) -> dict:
        return dict(self._values)
