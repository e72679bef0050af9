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

A FLOP record names the matrix engine it ran on (the one the libraries' BF16 kernels are built on,
see peaks.bf16_engine; "fma" for FP32 kernels), its share of that engine's peak, and the best
engine's peak measured here. Slow calls are held to a time budget per case (``case_budget()``:
fewer repetitions, a call over the budget timed once after its warm-up), and a baseline too slow for
its full shape is measured at a smaller one (``paired_scaled``, ``budgeted_baseline``) and labelled so.

The whole session is held to ``SESSION_BUDGET_S``: each bench file gets a share of what is left when
it starts, in proportion to its cases; a file running behind its share gets smaller case budgets (the
least past it: a file of few costly cases, deep_ep's process launches, still reports them all), and
a case starting after the session's budget is spent is skipped, saying so (pytest's skip reason and
the table's "skipped for time" lines).
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass

import pytest

from deepjit.backends.host import cpu_identity

from .peaks import Peaks, bf16_engine

RESULTS_PATH = os.path.join("build", "bench", "results.json")
# Seconds one case may spend on the timed repetitions of one timer (at least one each is always run).
CASE_BUDGET_S = float(os.environ.get("BENCH_CASE_BUDGET_S", "20"))
# Seconds the whole bench session may take, shared among the files (see Schedule).
SESSION_BUDGET_S = float(os.environ.get("BENCH_SESSION_BUDGET_S", "690"))


# A case runs about this many budgeted timers (warm-ups, the op, its baseline): a file's share left,
# over its cases left and this, is the most one timer's budget may be.
TIMERS_PER_CASE = 3
MIN_CASE_BUDGET_S = 1.0


class Schedule:
    """Shares the session budget among the bench files, in the order pytest runs them: a file starting
    gets the time left in the session in proportion to its share of the cases left (time a fast file
    leaves unused goes to the later ones, time a slow one overruns is taken from them). Only once the
    session's time is spent are cases skipped. ``start`` is called before every bench case."""

    def __init__(self, files: list[str], total: float = SESSION_BUDGET_S, clock: Callable[[], float] = time.monotonic):
        self.cases = Counter(files)            # cases left per file
        self.total, self.clock = total, clock
        self.end = clock() + total
        self.file: str | None = None
        self.share = self.file_start = 0.0
        self.budget = CASE_BUDGET_S
        self.skipped: list[tuple[str, str]] = []   # (case, reason)

    def start(self, nodeid: str) -> str | None:
        """Sets ``budget`` for the case; returns why it is skipped for time, or None to run it."""
        path, now = nodeid.split("::")[0], self.clock()
        if path != self.file:
            if self.file is not None:
                self.cases[self.file] = 0
            left_cases = sum(self.cases.values())
            self.share = max(0.0, self.end - now) * self.cases[path] / max(1, left_cases)
            self.file, self.file_start = path, now
        left = self.share - (now - self.file_start)
        cases_left = max(1, self.cases[path])
        self.cases[path] -= 1
        if now >= self.end:
            reason = (f"skipped for time: the {self.total:.0f} s bench session (BENCH_SESSION_BUDGET_S) "
                      f"is spent ({path} had a {self.share:.0f} s share)")
            self.skipped.append((nodeid, reason))
            return reason
        self.budget = min(CASE_BUDGET_S, max(MIN_CASE_BUDGET_S, left / cases_left / TIMERS_PER_CASE))
        return None


_SCHEDULE: Schedule | None = None


def case_budget() -> float:
    """The running case's budget: CASE_BUDGET_S, less where its file runs behind its share."""
    return _SCHEDULE.budget if _SCHEDULE is not None else CASE_BUDGET_S


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
    share_of_peak: float | None       # of the peak below: the engine's for FLOPs, copy bandwidth for bytes
    peak: str | None
    engine: str | None = None         # matrix engine the op ran on (FLOP records)
    engine_peak: float | None = None  # its measured peak, TFLOP/s
    best_engine: str | None = None    # the engine with the highest peak measured on this machine
    best_engine_peak: float | None = None
    share_of_best: float | None = None


class Bench:
    def __init__(self):
        self.peaks = Peaks()
        self.records: list[Record] = []
        self.load_warnings: list[str] = []

    @staticmethod
    def time(fn: Callable[[], object], warmup: int = 2, reps: int = 7, min_seconds: float = 0.0,
             budget: float | None = None) -> float:
        """Median wall time of ``fn`` in seconds; warm-ups and repetitions stop early (one of each at
        least) once they have taken ``budget`` seconds (case_budget()) and ``min_seconds``."""
        budget = case_budget() if budget is None else budget
        start = time.perf_counter()
        for _ in range(warmup):
            fn()
            if time.perf_counter() - start >= budget:   # one warm-up is enough for a call this slow
                break
        times = []
        start = time.perf_counter()
        while len(times) < reps or time.perf_counter() - start < min_seconds:
            if times and time.perf_counter() - start >= max(budget, min_seconds):
                break
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        times.sort()
        return times[len(times) // 2]

    @staticmethod
    def paired(fn: Callable[[], object], baseline: Callable[[], object], reps: int,
               budget: float | None = None, fn_seconds: float | None = None) -> tuple[float, float]:
        """Best wall times of ``fn`` and ``baseline`` over ``reps`` alternating runs after one warm-up
        each: on a shared machine a load spike then slows both or neither side of the ratio. Where
        the warm-ups say ``reps`` pairs would overrun ``budget`` seconds (CASE_BUDGET_S), fewer are
        run, one at least. ``fn_seconds``: ``fn`` has just been called (warm) and took that long."""
        t_fn = fn_seconds
        if t_fn is None:
            t = time.perf_counter()
            fn()
            t_fn = time.perf_counter() - t
        t = time.perf_counter()
        baseline()
        t_pair = t_fn + time.perf_counter() - t
        budget = case_budget() if budget is None else budget
        reps = max(1, min(reps, int(budget // max(t_pair, 1e-9))))
        best, best_base = float("inf"), float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
            t = time.perf_counter()
            baseline()
            best_base = min(best_base, time.perf_counter() - t)
        return best, best_base

    @staticmethod
    def paired_scaled(fn: Callable[[], object], make_baseline: Callable[[int], tuple[Callable[[], object], float]],
                      sizes: list[int], reps: int, budget: float | None = None) -> tuple[float, float, int]:
        """``paired`` against a baseline that may be far slower than ``fn`` on this CPU (torch's BF16
        matmul without BF16 hardware): ``make_baseline(size)`` gives the call and its FLOPs, ``sizes``
        run small to full. The baseline runs at the largest size whose call takes at most a quarter
        of the budget (or as long as ``fn``, up to half the budget), its time scaled to the full
        size's FLOPs. Returns (seconds of fn, baseline seconds at full size, size used)."""
        budget = case_budget() if budget is None else budget
        t = time.perf_counter()
        fn()
        t_fn = time.perf_counter() - t
        full_flops = make_baseline(sizes[-1])[1]
        call, flops = make_baseline(sizes[0])
        call()
        t = time.perf_counter()
        call()
        rate, size = (time.perf_counter() - t) / flops, sizes[0]
        for bigger in sizes[1:]:
            c, f = make_baseline(bigger)
            if rate * f > min(max(budget / 4, t_fn), budget / 2):
                break
            call, flops, size = c, f, bigger
        t_op, t_base = Bench.paired(fn, call, reps, budget, fn_seconds=t_fn)
        return t_op, t_base * full_flops / flops, size

    @staticmethod
    def budgeted_baseline(make: Callable[[int], tuple[Callable[[], object], float]], sizes: list[int],
                          budget: float | None = None, reps: int = 2) -> tuple[float, int]:
        """(seconds per FLOP, size measured) for a baseline whose full shape may be far too slow
        (torch._scaled_mm runs at 0.1 GFLOP/s on some CPUs). ``make(size)`` gives the call and its
        FLOPs; ``sizes`` run small to full. Each size is timed (one warm-up, best of ``reps``) while
        the previous one's rate says it fits the budget; the largest size timed gives the rate."""
        budget = case_budget() if budget is None else budget
        rate, measured = None, sizes[0]
        for size in sizes:
            fn, flops = make(size)
            if rate is not None and rate * flops * (reps + 1) > budget:
                break
            fn()
            best = float("inf")
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t)
            rate, measured = best / flops, size
        return rate, measured

    def record(self, suite: str, case: str, shape: str, seconds: float, *, flops: float | None = None,
               nbytes: float | None = None, baseline: str | None = None,
               baseline_seconds: float | None = None, peak: str = "bf16") -> Record:
        """Throughput from ``flops`` (TFLOP/s, share of the peak of the engine it ran on: ``peak``
        "bf16" for the BF16 kernels' engine, "fp32" for FP32 kernels on the FMA engine, or an engine's
        name where the op chose one itself, as deep_gemm's FP8 GEMMs do by rows) or
        ``nbytes`` (GB/s, share of copy bandwidth); otherwise latency in us. The ratio is the
        speed-up over the baseline measured in the same run."""
        engine = None
        if flops is not None:
            metric, value = "TFLOP/s", flops / seconds / 1e12
            engine = {"bf16": bf16_engine(), "fp32": "fma"}.get(peak, peak)
            peak_name = f"{engine} peak"
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
        rec = Record(suite, case, shape, metric, value, seconds, baseline, base_value, ratio, None, peak_name, engine)
        self._share(rec)
        self.records.append(rec)
        return rec

    def _share(self, rec: Record) -> None:
        """Fills the record's ceilings and shares from the current readings."""
        if rec.peak == "copy bandwidth":
            rec.share_of_peak = rec.value / self.peaks.copy_gbs
        elif rec.engine is not None:
            rec.engine_peak = self.peaks.engine_peak_gflops(rec.engine) / 1e3
            rec.best_engine, best = self.peaks.best_engine()
            rec.best_engine_peak = best / 1e3
            rec.share_of_peak = rec.value / rec.engine_peak
            rec.share_of_best = rec.value / rec.best_engine_peak

    def finish(self) -> None:
        """Measures the ceilings again (the machine may have been loaded at first use) and takes
        every share of the higher reading."""
        self.load_warnings = self.peaks.remeasure()
        for rec in self.records:
            self._share(rec)

    def table(self) -> str:
        head = (f"{'suite':<14}{'case':<34}{'shape':<26}{'time':>11}{'value':>16}{'engine':>12}{'of peak':>9}"
                f"{'of best':>9}{'vs baseline':>13}  baseline")
        lines = [head, "-" * len(head)]
        for r in self.records:
            share = f"{r.share_of_peak:.2f}" if r.share_of_peak is not None else "-"
            best = f"{r.share_of_best:.2f}" if r.share_of_best is not None else "-"
            ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
            lines.append(f"{r.suite:<14}{r.case[:33]:<34}{r.shape[:25]:<26}{r.seconds * 1e3:>9.3f}ms"
                         f"{r.value:>10.3f} {r.metric:<7}{r.engine or '-':>10}{share:>9}{best:>9}{ratio:>13}"
                         f"  {r.baseline or ''}")
        p = self.peaks.as_dict()
        if p:
            lines.append("ceilings: " + ", ".join(f"{k}={v:.1f}" for k, v in p.items()))
        lines += [f"ceilings: {note}" for note in self.peaks.unmeasured()]
        lines += [f"{case}: {reason}" for case, reason in _skipped()]
        for w in self.load_warnings:
            lines.append(f"LOADED MACHINE: {w}; shares and ratios of this run are unreliable")
        return "\n".join(lines)

    def write(self, path: str = RESULTS_PATH) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"cpu": cpu_identity()[0], "engines_present": self.peaks.present,
                       "engines_unmeasured": self.peaks.unmeasured(), "ceilings": self.peaks.as_dict(),
                       "load_warnings": self.load_warnings,
                       "skipped_for_time": [{"case": c, "reason": r} for c, r in _skipped()], "records": [asdict(r) for r in self.records]}, f, indent=1)


_BENCH: Bench | None = None


@pytest.fixture(scope="session")
def bench() -> Bench:
    global _BENCH
    if _BENCH is None:
        _BENCH = Bench()
    return _BENCH


def _skipped() -> list[tuple[str, str]]:
    return _SCHEDULE.skipped if _SCHEDULE is not None else []


def pytest_runtest_setup(item):
    """Bench cases only (marker-skipped ones never get here): the session schedule starts at the
    first one, over the bench cases pytest will run."""
    global _SCHEDULE
    if "bench" not in item.keywords:
        return
    if _SCHEDULE is None:
        _SCHEDULE = Schedule([i.nodeid.split("::")[0] for i in item.session.items
                              if "bench" in i.keywords and i.get_closest_marker("skip") is None])
    reason = _SCHEDULE.start(item.nodeid)
    if reason:
        pytest.skip(reason)


def pytest_terminal_summary(terminalreporter):
    if _BENCH is not None and _BENCH.records:
        _BENCH.finish()
        terminalreporter.write_sep("=", "benchmarks")
        terminalreporter.write_line(_BENCH.table())
        _BENCH.write()
        terminalreporter.write_line(f"written {RESULTS_PATH}")
