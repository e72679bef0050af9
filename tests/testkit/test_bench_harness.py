"""The bench harness itself: shares of the right ceiling, ceilings re-measured at the end."""
import pytest

from . import peaks
from .bench_plugin import Bench


@pytest.fixture
def fake_ceilings(monkeypatch):
    readings = {"bf16_peak_gflops": [400.0, 500.0], "fp32_peak_gflops": [200.0, 200.0], "copy_gbs": [20.0, 30.0]}
    for name, values in readings.items():
        monkeypatch.setitem(peaks.MEASURES, name, lambda values=values: values.pop(0))
    return readings


def test_record_shares_and_ratios(fake_ceilings):
    b = Bench()
    gemm = b.record("s", "bf16", "x", 1.0, flops=200e9, baseline="t", baseline_seconds=2.0)
    fp32 = b.record("s", "fp32", "x", 1.0, flops=100e9, peak="fp32")
    copy = b.record("s", "copy", "x", 0.5, nbytes=5e9)
    lat = b.record("s", "lat", "x", 2e-6, baseline="t", baseline_seconds=4e-6)
    assert gemm.value == pytest.approx(0.2) and gemm.share_of_peak == pytest.approx(0.5) and gemm.ratio == 2
    assert fp32.peak == "fp32 fma peak" and fp32.share_of_peak == pytest.approx(0.5)
    assert copy.value == pytest.approx(10.0) and copy.share_of_peak == pytest.approx(0.5)
    assert lat.metric == "us" and lat.share_of_peak is None and lat.ratio == pytest.approx(2.0)


def test_finish_keeps_the_higher_reading_and_flags_a_loaded_run(fake_ceilings):
    b = Bench()
    gemm = b.record("s", "bf16", "x", 1.0, flops=200e9)
    fp32 = b.record("s", "fp32", "x", 1.0, flops=100e9, peak="fp32")
    b.finish()
    assert gemm.share_of_peak == pytest.approx(0.4) and fp32.share_of_peak == pytest.approx(0.5)
    assert len(b.load_warnings) == 1 and "bf16_peak_gflops" in b.load_warnings[0]
    assert "LOADED MACHINE" in b.table()
