"""The EP window estimate machinery (deep_ep/ascend/ep_estimates.py, ``make ascend-check``'s EP8 shapes) at
a tiny shape across 2 real processes: every rank reports a positive, finite timeline estimate for its
dispatch and its combine, with DeepEP's algorithm bytes, and the results.json record carries the fields."""
import json
import math

import torch

from deep_ep.ascend import ep_estimates


def test_algorithm_bytes_follow_deepep_benchmarks():
    idx = torch.tensor([[0, 5, -1], [1, 2, 3]])
    ll = ep_estimates.algorithm_bytes("low_latency", idx, 256, True, 0)
    assert ll == {"dispatch": 5 * (256 + 8 + 16), "combine": 5 * 512}
    normal = ep_estimates.algorithm_bytes("normal", idx, 256, True, recv_rows=3)
    assert normal == {"dispatch": 3 * 512 * (1 + 4 / 128) / 2, "combine": 3 * 512}


def test_two_rank_estimate_is_positive_and_recorded(tmp_path):
    from deepjit.tilelang_route.ascend_check import write_results

    out = ep_estimates.estimate("normal", 2, 8, hidden=256, experts=16, timeout_s=120)
    results = []
    for phase in ("dispatch", "combine"):
        o = out[phase]
        assert len(o["ranks_us"]) == 2 and all(math.isfinite(t) and t > 0 for t in o["ranks_us"])
        assert o["us"] == max(o["ranks_us"]) and o["bytes"] > 0 and o["gbps"] > 0
        results.append({"library": "deep_ep", "kernel": phase, "shape": "published", "estimate": o["estimate"],
                        "roofline": o["roofline"], "operand": o["operand"], "extra": {"algorithm_gbps": o["gbps"]}})
    records = json.load(open(write_results(results, str(tmp_path), log=lambda _: None)))
    assert [r["kernel"] for r in records] == ["dispatch", "combine"]
    assert all(r["estimated_us"] > 0 and r["algorithm_gbps"] > 0 and "not a measurement" in r["label"]
               for r in records)
