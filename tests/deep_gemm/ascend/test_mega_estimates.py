"""The Mega MoE estimate machinery (deep_gemm/ascend/mega_estimates.py, ``make ascend-check``'s EP8 shape) at
the test suite's Mega MoE shape across 2 real processes: every rank reports a finite, positive timeline
estimate of its whole call, the figure is the slowest rank's, and the results.json record carries it beside
the published figure."""
import json
import math

from deep_gemm.ascend import mega_estimates
from deepjit.tilelang_route.ascend_check import write_results

from ..test_mega_moe import EXPERTS, HIDDEN, INTER, TOPK

SMALL = mega_estimates.Shape("test", EXPERTS, TOPK, HIDDEN, INTER, 4, 1.0, "not published: a test shape")


def test_weights_take_the_ascend_layout():
    import torch
    w, sf = mega_estimates.weights(2, 512, 256, torch.Generator().manual_seed(0))
    assert w.shape == (2, 2, 256, 128) and w.dtype == torch.int8
    assert sf.shape == (2, 2, 256 // 64, 256) and sf.dtype == torch.int16


def test_two_rank_estimate_is_the_slowest_rank_and_recorded(tmp_path):
    outcome = mega_estimates.published_shape_outcome(SMALL, 2)
    times = outcome["extra"]["ranks_us"]
    assert len(times) == 2 and all(math.isfinite(t) and t > 0 for t in times)
    assert outcome["estimate"].seconds * 1e6 == max(times)
    assert outcome["estimate"].hbm_bytes > 0 and "not a measurement" in outcome["note"]
    records = json.load(open(write_results([{"library": "deep_gemm", "kernel": "fp8_fp4_mega_moe", "shape": "test",
                                              **outcome}], str(tmp_path), log=lambda _: None)))
    assert records[0]["estimated_us"] == max(times) and records[0]["published_us"] == 1.0
    assert "not a measurement" in records[0]["label"]
