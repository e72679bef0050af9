"""The bench harness itself: shares of the peak of the engine each op ran on and of the best engine,
ceilings re-measured at the end, the time budget of slow cases and slow baselines."""
import time

import pytest

from . import bench_plugin, peaks
from .bench_plugin import Bench, Schedule

AVX512_BF16 = "avx2 fma avx512f avx512bw avx512_bf16"
SAPPHIRE = AVX512_BF16 + " amx_tile amx_bf16"
ZEN3 = "avx2 fma"


@pytest.fixture
def fake_ceilings(monkeypatch):
    readings = {"avx512bf16_peak_gflops": [400.0, 500.0], "fma_peak_gflops": [200.0, 200.0], "copy_gbs": [20.0, 30.0],
                "brgemm_peak_gflops": [2000.0, 2000.0]}
    for name, values in readings.items():
        monkeypatch.setitem(peaks.MEASURES, name, lambda values=values: values.pop(0))
    # brgemm is present wherever torch exports it; these cases model CPUs without it unless they say so
    monkeypatch.setattr(peaks.me, "brgemm_missing", lambda: "not in these cases")
    for var in ("DJ_HOST_MATRIX", "BENCH_HOST_MATRIX", "BENCH_JIT_HOST_MARCH", "DJ_JIT_HOST_MARCH"):
        monkeypatch.delenv(var, raising=False)
    return lambda flags: monkeypatch.setattr(peaks, "cpu_flags", lambda: flags)


def test_record_shares_and_ratios(fake_ceilings):
    fake_ceilings(AVX512_BF16)
    b = Bench()
    gemm = b.record("s", "bf16", "x", 1.0, flops=200e9, baseline="t", baseline_seconds=2.0)
    fp32 = b.record("s", "fp32", "x", 1.0, flops=100e9, peak="fp32")
    copy = b.record("s", "copy", "x", 0.5, nbytes=5e9)
    lat = b.record("s", "lat", "x", 2e-6, baseline="t", baseline_seconds=4e-6)
    assert gemm.value == pytest.approx(0.2) and gemm.share_of_peak == pytest.approx(0.5) and gemm.ratio == 2
    assert gemm.engine == "avx512bf16" and gemm.peak == "avx512bf16 peak" and gemm.engine_peak == pytest.approx(0.4)
    assert gemm.best_engine == "avx512bf16" and gemm.share_of_best == pytest.approx(0.5)
    assert fp32.engine == "fma" and fp32.share_of_peak == pytest.approx(0.5)
    assert fp32.best_engine == "avx512bf16" and fp32.share_of_best == pytest.approx(0.25)
    assert copy.value == pytest.approx(10.0) and copy.share_of_peak == pytest.approx(0.5) and copy.engine is None
    assert lat.metric == "us" and lat.share_of_peak is None and lat.ratio == pytest.approx(2.0)


def test_without_the_dot_product_bf16_kernels_run_on_fma(fake_ceilings):
    fake_ceilings(ZEN3)
    b = Bench()
    gemm = b.record("s", "bf16", "x", 1.0, flops=100e9)
    assert gemm.engine == "fma" and gemm.share_of_peak == pytest.approx(0.5)
    assert gemm.best_engine == "fma" and b.peaks.present == ["fma"]
    assert "avx512bf16_peak_gflops" not in b.peaks.as_dict()


def test_forced_engine_is_the_one_reported(fake_ceilings, monkeypatch):
    fake_ceilings(AVX512_BF16)
    monkeypatch.setenv("DJ_HOST_MATRIX", "fma")
    gemm = Bench().record("s", "bf16", "x", 1.0, flops=100e9)
    assert gemm.engine == "fma" and gemm.share_of_peak == pytest.approx(0.5)
    assert gemm.best_engine == "avx512bf16" and gemm.share_of_best == pytest.approx(0.25)


def test_amx_runs_bf16_kernels_on_brgemm(fake_ceilings, monkeypatch):
    monkeypatch.setattr(peaks.me, "brgemm_missing", lambda: None)
    fake_ceilings(SAPPHIRE)
    b = Bench()
    gemm = b.record("s", "bf16", "x", 1.0, flops=1000e9)
    assert gemm.engine == "brgemm" and gemm.share_of_peak == pytest.approx(0.5)
    assert gemm.best_engine == "brgemm" and b.peaks.unmeasured() == []


def test_finish_keeps_the_higher_reading_and_flags_a_loaded_run(fake_ceilings):
    fake_ceilings(AVX512_BF16)
    b = Bench()
    gemm = b.record("s", "bf16", "x", 1.0, flops=200e9)
    fp32 = b.record("s", "fp32", "x", 1.0, flops=100e9, peak="fp32")
    b.finish()
    assert gemm.share_of_peak == pytest.approx(0.4) and fp32.share_of_peak == pytest.approx(0.5)
    assert fp32.share_of_best == pytest.approx(0.2)
    assert len(b.load_warnings) == 1 and "avx512bf16_peak_gflops" in b.load_warnings[0]
    assert "LOADED MACHINE" in b.table()


def test_paired_holds_slow_cases_to_the_budget():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.03)

    Bench.paired(slow, lambda: None, reps=50, budget=0.1)
    assert 2 <= len(calls) <= 5            # warm-up + about 3 timed pairs, not 50


def test_budgeted_baseline_stops_at_the_size_that_fits():
    def make(size):
        return (lambda: time.sleep(size * 1e-3)), float(size)

    rate, size = Bench.budgeted_baseline(make, [1, 4, 16, 64, 256], budget=0.1)
    assert size == 16 and rate == pytest.approx(1e-3, rel=0.5)
    rate, size = Bench.budgeted_baseline(make, [1, 4], budget=10.0)
    assert size == 4


def test_time_holds_slow_calls_to_the_budget():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.03)

    Bench.time(slow, warmup=1, reps=50, budget=0.1)
    assert 3 <= len(calls) <= 6            # warm-up + about 4 timed calls, not 50


class VirtualClock:
    """Stands in for the harness's ``time`` module: ``sleep`` advances ``perf_counter`` exactly, so the
    harness's sizing logic is tested without wall-clock expectations (those belong in benchmarks)."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = VirtualClock()
    monkeypatch.setattr(bench_plugin, "time", fake)
    return fake


def test_paired_scaled_shrinks_a_slow_baseline_and_scales_its_time(clock):
    made = []

    def make(size):
        made.append(size)
        return (lambda: clock.sleep(size * 1e-4)), float(size)

    t_op, t_base, size = Bench.paired_scaled(lambda: clock.sleep(0.001), make, [10, 100, 1000, 10000], reps=2,
                                             budget=0.2)
    assert size == 100                     # 100 calls take 10 ms <= budget / 4; 1000 take 100 ms
    assert t_base == pytest.approx(10000 * 1e-4) and t_op == pytest.approx(0.001)
    _, _, size = Bench.paired_scaled(lambda: None, make, [10, 100], reps=2, budget=10.0)
    assert size == 100


def test_time_holds_slow_warm_ups_to_the_budget():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.05)

    Bench.time(slow, warmup=2, reps=7, budget=0.01)
    assert len(calls) == 2                 # a call over the budget: one warm-up, one timed call


def test_paired_scaled_holds_the_baseline_to_half_the_budget_beside_a_slow_op(clock):
    def make(size):
        return (lambda: clock.sleep(size * 1e-4)), float(size)

    # the op takes 30 ms, more than the whole budget: the baseline may not take as long
    _, _, size = Bench.paired_scaled(lambda: clock.sleep(0.03), make, [10, 100, 1000], reps=2, budget=0.02)
    assert size == 10                      # 100 calls would take 10 ms > budget / 2


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_schedule_shares_the_session_by_cases_and_carries_unused_time():
    clock = _Clock()
    s = Schedule(["a.py"] * 2 + ["b.py"] * 6, total=80.0, clock=clock)
    assert s.start("a.py::t1") is None and s.share == pytest.approx(20.0)   # 2 of 8 cases
    assert s.budget == pytest.approx(min(bench_plugin.CASE_BUDGET_S, 20.0 / 2 / bench_plugin.TIMERS_PER_CASE))
    clock.now = 5.0
    assert s.start("a.py::t2") is None
    clock.now = 10.0                       # a.py used 10 of its 20 s: b.py gets all 70 s left
    assert s.start("b.py::t1") is None and s.share == pytest.approx(70.0)


def test_schedule_runs_a_file_past_its_share_at_the_least_budget_and_skips_once_the_session_is_spent():
    clock = _Clock()
    s = Schedule(["a.py"] * 3 + ["b.py"] * 2, total=50.0, clock=clock)
    s.start("a.py::t1")                    # a.py's share: 30 s
    clock.now = 27.0                       # 3 s left for 2 cases
    assert s.start("a.py::t2") is None and s.budget == pytest.approx(bench_plugin.MIN_CASE_BUDGET_S)
    clock.now = 35.0                       # past a.py's share, the session has 15 s left: still run
    assert s.start("a.py::t3") is None and s.budget == pytest.approx(bench_plugin.MIN_CASE_BUDGET_S)
    clock.now = 40.0
    assert s.start("b.py::t1") is None and s.share == pytest.approx(10.0)
    clock.now = 51.0
    reason = s.start("b.py::t2")
    assert reason.startswith("skipped for time: the 50 s bench session (BENCH_SESSION_BUDGET_S) is spent")
    assert s.skipped == [("b.py::t2", reason)]


def test_brgemm_peak_loop_runs_every_tile():
    """The brgemm peak loop computes its tile at every shape: C = sum over k of 1.0 * 2^-7, accumulated
    over the iterations after the first."""
    if "brgemm" not in peaks.me.present_engines(peaks.cpu_flags()):
        pytest.skip("torch exports no brgemm micro-kernel here")
    kernel = peaks._compile_loop("brgemm_peak", peaks._BRGEMM_LOOP, "brgemm")
    for m, n, k in peaks.BRGEMM_TILES:
        rate, iters, sink = peaks.brgemm_tile_rate(kernel, 2, (m, n, k), 2 * m * n * k * 3)
        assert iters == 3 and rate > 0
        assert sink.tolist() == [iters * k / 128] * 2, (m, n, k)
