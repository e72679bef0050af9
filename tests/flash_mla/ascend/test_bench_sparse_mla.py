"""Benchmarks of the Ascend sparse MLA kernel on an Ascend 950 (make bench, NPU only): TFLOP/s against
DeepSeek's hand-written kernel, 410 TFLOP/s in prefill and 360 in decode (issue 14). FLOPs: 2 * h_q *
(d_qk + d_v) per attended (query row, token) pair."""
import pytest
import torch

import flash_mla
from tests.testkit.bench_plugin import Bench

pytestmark = [pytest.mark.bench, pytest.mark.npu]
TARGET_TFLOPS = {"prefill": 410.0, "decode": 360.0}


def _synced(fn):
    def run():
        fn()
        torch.npu.synchronize()
    return run


def _record(bench, case, shape, seconds, flops, target):
    bench.record("flash_mla", f"ascend {case}", shape, seconds, flops=flops,
                 baseline=f"DeepSeek Ascend kernel ({target:.0f} TFLOP/s)", baseline_seconds=flops / (target * 1e12))


def test_sparse_decode_speed(bench):
    b, h_q, topk, page, num_blocks = 64, 64, 2048, 64, 4096
    dev = torch.device("npu")
    k = (torch.randn(num_blocks, page, 1, 512) / 10).bfloat16()
    cache = flash_mla.quantize_k_cache(k, flash_mla.KVCacheFormat.V41_FP8).to(dev)
    q = torch.randn(b, 1, h_q, 512).clamp(-1, 1).bfloat16().to(dev)
    idx = torch.randint(0, num_blocks * page, (b, 1, topk), dtype=torch.int32).to(dev)
    meta, _ = flash_mla.get_mla_metadata()
    run = _synced(lambda: flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, None, None, False, True,
                                                           idx))
    seconds = Bench.time(run, reps=10)
    _record(bench, "sparse decode", f"b{b} h{h_q} topk{topk}", seconds, 2 * b * h_q * topk * 1024,
            TARGET_TFLOPS["decode"])


def test_sparse_prefill_speed(bench):
    s_q, s_kv, h_q, topk = 4096, 8192, 64, 2048
    dev = torch.device("npu")
    q = (torch.randn(s_q, h_q, 512) / 10).bfloat16().to(dev)
    kv = (torch.randn(s_kv, 1, 512) / 10).bfloat16().to(dev)
    idx = torch.stack([torch.randperm(s_kv)[:topk] for _ in range(s_q)]).view(s_q, 1, topk).int().to(dev)
    run = _synced(lambda: flash_mla.flash_mla_sparse_fwd(q, kv, idx, 512 ** -0.5))
    seconds = Bench.time(run, reps=5)
    _record(bench, "sparse prefill", f"sq{s_q} skv{s_kv} h{h_q} topk{topk}", seconds, 2 * s_q * h_q * topk * 1024,
            TARGET_TFLOPS["prefill"])
