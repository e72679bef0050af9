"""Benchmarks (make bench): host kernels against torch BF16 matmul throughput and the reference path.

Targets (issue 6): sparse decode and prefill >= 0.5 x torch BF16 matmul FLOP/s, decode >= 10 x the
reference path. FLOPs: 2 * h_q * (d_qk + d_v) per attended (query row, token) pair.

The machine is shared, so the op and its baseline are timed alternately and each keeps its best
time: a load spike then slows both or neither, not just one side of the ratio. The matmul's size
shrinks where it would overrun the case's time budget (Bench.paired_scaled; the label gives n): only
its throughput is compared."""

import pytest
import torch

import flash_mla
from flash_mla import reference
from flash_mla.kv_cache import KVCacheFormat
from flash_mla.reference.sparse import KVScope
from tests.testkit.bench_plugin import Bench

pytestmark = pytest.mark.bench


def _matmul(n=2048):
    """torch BF16 matmul of 2 n^3 FLOPs; returns (callable, flops)."""
    a, b = torch.randn(n, n).bfloat16(), torch.randn(n, n).bfloat16()
    return (lambda: a @ b), 2 * n ** 3


def _decode_inputs(fmt, b, h_q, topk, extra_fmt=None, extra_topk=0, page=64, num_blocks=1024):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, 1, h_q, fmt.d_qk, generator=g).clamp(-1, 1).bfloat16()

    def scope(f, tk, seed):
        k = (torch.randn(num_blocks, page, 1, f.d_qk, generator=torch.Generator().manual_seed(seed)) / 10).bfloat16()
        cache = flash_mla.quantize_k_cache(k, f)
        idx = torch.randint(0, num_blocks * page, (b, 1, tk), generator=g, dtype=torch.int32)
        return KVScope(cache, f, f.placement(), idx)

    scopes = [scope(fmt, topk, 1)] + ([scope(extra_fmt, extra_topk, 2)] if extra_fmt else [])
    return q, scopes


@pytest.mark.parametrize("name,fmt,h_q,topk,extra_fmt,extra_topk", [
    ("V3.2 FP8", KVCacheFormat.V32_FP8, 128, 2048, None, 0),
    ("V4.1 FP8", KVCacheFormat.V41_FP8, 128, 2048, None, 0),
    ("V4.1 FP8 + FP4 extra", KVCacheFormat.V41_FP8, 128, 128, KVCacheFormat.V41_FP4, 1920),
    ("V4.1 FP8 h64", KVCacheFormat.V41_FP8, 64, 2048, None, 0),
])
def test_sparse_decode_speed(bench, name, fmt, h_q, topk, extra_fmt, extra_topk):
    b = 32
    q, scopes = _decode_inputs(fmt, b, h_q, topk, extra_fmt, extra_topk)
    meta, _ = flash_mla.get_mla_metadata()
    extra = scopes[1] if len(scopes) > 1 else None

    def run():
        return flash_mla.flash_mla_with_kvcache(q, scopes[0].cache, None, None, 512, meta, None, None, False, True,
                                                scopes[0].indices, None, extra.cache if extra else None,
                                                extra.indices if extra else None)

    flops = 2 * b * h_q * (topk + extra_topk) * (fmt.d_qk + 512)
    seconds, mm_seconds, n = Bench.paired_scaled(run, _matmul, [512, 1024, 2048], reps=7)
    shape = f"b{b} h{h_q} d{fmt.d_qk} topk{topk + extra_topk}"
    bench.record("flash_mla", f"sparse decode {name}", shape, seconds, flops=flops,
                 baseline=f"torch bf16 matmul n={n}", baseline_seconds=mm_seconds * flops / (2 * 2048 ** 3))
    if extra is None and h_q == 128:
        seconds, ref_seconds = Bench.paired(run, lambda: reference.sparse_decode(q, scopes, fmt.d_qk ** -0.5, 512, None),
                                       reps=2)
        bench.record("flash_mla", f"sparse decode {name} vs ref", shape, seconds, flops=flops,
                     baseline="reference path", baseline_seconds=ref_seconds)


@pytest.mark.parametrize("h_q,d_qk", [(128, 576), (64, 576), (128, 512)])
def test_sparse_prefill_speed(bench, h_q, d_qk):
    s_q, s_kv, topk = 4096, 8192, 2048
    g = torch.Generator().manual_seed(0)
    q = (torch.randn(s_q, h_q, d_qk, generator=g) / 10).bfloat16()
    kv = (torch.randn(s_kv, 1, d_qk, generator=g) / 10).bfloat16()
    idx = torch.stack([torch.randperm(s_kv, generator=g)[:topk] for _ in range(s_q)]).view(s_q, 1, topk).int()
    seconds, mm_seconds, n = Bench.paired_scaled(lambda: flash_mla.flash_mla_sparse_fwd(q, kv, idx, d_qk ** -0.5),
                                                 _matmul, [1024, 2048, 4096], reps=2)
    flops = 2 * s_q * topk * h_q * (d_qk + 512)
    bench.record("flash_mla", "sparse prefill", f"sq{s_q} skv{s_kv} topk{topk} h{h_q} d{d_qk}", seconds, flops=flops,
                 baseline=f"torch bf16 matmul n={n}", baseline_seconds=mm_seconds * flops / (2 * 4096 ** 3))
