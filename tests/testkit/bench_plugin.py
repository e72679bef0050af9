"""Benchmark harness (pytest plugin, loaded from the root pyproject).

The ``bench`` fixture times callables (warm-up, repeats, median) and records cases; at the end
of the session it prints one table and writes ``build/bench/results.json``. Ceilings (torch BF16
matmul, the BF16 dot-product and FP32 FMA instruction peaks, copy bandwidth) are measured in the
same run, at first use and again at the end; shares are taken of the higher reading, and a run
whose readings differ much is flagged as loaded.

    def test_gemm_speed(bench):
        t = bench.time(lambda: op(a, b))
        t0 = bench.time(lambda: a @ b)
        bench.record("deep_gemm", "bf16_gemm_nt", "4096x7168x2048", flops=2*m*n*k, seconds=t,
                     baseline="torch bf16 matmul", baseline_seconds=t0)
        # an FP32 kernel: share of the FP32 FMA peak instead of the BF16 one
        bench.record("deep_gemm", "tf32_hc_prenorm_gemm", "...", t, flops=f, peak="fp32")
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import pytest

from .peaks import Peaks

RESULTS_PATH = os.path.join("build", "bench", "results.json")
# record(peak=...) -> (name in the table, Peaks attribute, scale of the attribute to the metric)
FLOP_PEAKS = {"bf16": ("bf16 instruction peak", "bf16_peak_gflops"), "fp32": ("fp32 fma peak", "fp32_peak_gflops")}


@dataclass
class Record:
    suite: str
    case: str
    shape: str
    metric: str            # "TFLOP/s", "GB/s" or "us"
    value: float
    seconds: float
    baseline: str | None
    baseline_value: float | None
    ratio: float | None     # value / baseline_value for throughput; baseline time / time for "us"
    share_of_peak: float | None
    peak: str | None


class Bench:
    def __init__(self):
        self.peaks = Peaks()
        self.records: list[Record] = []
        self.load_warnings: list[str] = []

    @staticmethod
    def time(fn: Callable[[], object], warmup: int = 2, reps: int = 7, min_seconds: float = 0.0) -> float:
        """Median wall time of ``fn`` in seconds."""
        for _ in range(warmup):
            fn()
        times = []
        start = time.perf_counter()
        while len(times) < reps or time.perf_counter() - start < min_seconds:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        times.sort()
        return times[len(times) // 2]

    @staticmethod
    def paired(fn: Callable[[], object], baseline: Callable[[], object], reps: int) -> tuple[float, float]:
        """Best wall times of ``fn`` and ``baseline`` over ``reps`` alternating runs after one warm-up
        each: on a shared machine a load spike then slows both or neither side of the ratio."""
        fn(), baseline()
        best, best_base = float("inf"), float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
            t = time.perf_counter()
            baseline()
            best_base = min(best_base, time.perf_counter() - t)
        return best, best_base

    def record(self, suite: str, case: str, shape: str, seconds: float, *, flops: float | None = None,
               nbytes: float | None = None, baseline: str | None = None,
               baseline_seconds: float | None = None, peak: str = "bf16") -> Record:
        """Throughput from ``flops`` (TFLOP/s, share of the ``peak`` instruction peak: "bf16" or
        "fp32") or ``nbytes`` (GB/s, share of copy bandwidth); otherwise latency in us. The ratio
        is the speed-up over the baseline measured in the same run."""
        if flops is not None:
            metric, value = "TFLOP/s", flops / seconds / 1e12
            peak_name = FLOP_PEAKS[peak][0]
            base_value = flops / baseline_seconds / 1e12 if baseline_seconds else None
        elif nbytes is not None:
            metric, value = "GB/s", nbytes / seconds / 1e9
            peak_name = "copy bandwidth"
            base_value = nbytes / baseline_seconds / 1e9 if baseline_seconds else None
        else:
            metric, value, peak_name = "us", seconds * 1e6, None
            base_value = baseline_seconds * 1e6 if baseline_seconds else None
        ratio = None
        if base_value:
            ratio = base_value / value if metric == "us" else value / base_value
        rec = Record(suite, case, shape, metric, value, seconds, baseline, base_value, ratio, None, peak_name)
        rec.share_of_peak = self._share(rec)
        self.records.append(rec)
        return rec

    def _share(self, rec: Record) -> float | None:
        if rec.peak is None:
            return None
        if rec.peak == "copy bandwidth":
            return rec.value / self.peaks.copy_gbs
        attr = next(a for name, a in FLOP_PEAKS.values() if name == rec.peak)
        return rec.value / (getattr(self.peaks, attr) / 1e3)

    def finish(self) -> None:
        """Measures the ceilings again (the machine may have been loaded at first use) and takes
        every share of the higher reading."""
        self.load_warnings = self.peaks.remeasure()
        for rec in self.records:
            rec.share_of_peak = self._share(rec)

    def table(self) -> str:
        head = f"{'suite':<14}{'case':<34}{'shape':<26}{'time':>11}{'value':>16}{'of peak':>9}{'vs baseline':>13}  baseline"
        lines = [head, "-" * len(head)]
        for r in self.records:
            share = f"{r.share_of_peak:.2f}" if r.share_of_peak is not None else "-"
            ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
            lines.append(f"{r.suite:<14}{r.case[:33]:<34}{r.shape[:25]:<26}{r.seconds * 1e3:>9.3f}ms"
                         f"{r.value:>10.3f} {r.metric:<7}{share:>7}{ratio:>13}  {r.baseline or ''}")
        p = self.peaks.as_dict()
        if p:
            lines.append("ceilings: " + ", ".join(f"{k}={v:.1f}" for k, v in p.items()))
        for w in self.load_warnings:
            lines.append(f"LOADED MACHINE: {w}; shares and ratios of this run are unreliable")
        return "\n".join(lines)

    def write(self, path: str = RESULTS_PATH) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"ceilings": self.peaks.as_dict(), "load_warnings": self.load_warnings,
                       "records": [asdict(r) for r in self.records]}, f, indent=1)


_BENCH: Bench | None = None


@pytest.fixture(scope="session")
def bench() -> Bench:
    global _BENCH
    if _BENCH is None:
        _BENCH = Bench()
    return _BENCH


def pytest_terminal_summary(terminalreporter):
    if _BENCH is not None and _BENCH.records:
        _BENCH.finish()
        terminalreporter.write_sep("=", "benchmarks")
        terminalreporter.write_line(_BENCH.table())
        _BENCH.write()
        terminalreporter.write_line(f"written {RESULTS_PATH}")
