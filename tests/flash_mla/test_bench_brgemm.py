"""flash_mla's sparse MLA decode on the brgemm matrix engine (oneDNN's micro-kernel from torch, AMX
tiles where the CPU has them) against torch's BF16 matmul of the same FLOPs and against the same op
on the best other engine this CPU has (avx512bf16 or fma), each pair timed interleaved in the same
run (Bench.paired: other processes' load slows both sides of a ratio or neither). The share column
is of the brgemm peak measured in this run (testkit/peaks.py).

Targets (issue 34): sparse decode >= 1.0x torch's BF16 matmul of the same FLOPs; no op slower than
on its previous engine (ratio vs the other engine >= 1.0)."""
import pytest

import flash_mla
from deepjit.backends.host import matrix_engine as me
from flash_mla import host as fmla_host
from flash_mla.kv_cache import KVCacheFormat
from tests.testkit.bench_plugin import Bench
from tests.testkit.peaks import bf16_engine, cpu_flags

from .test_bench_flash_mla import _decode_inputs, _matmul
from .test_host_engines import _OnEngine

pytestmark = pytest.mark.bench


def _other_engine() -> str:
    return next(e for e in me.present_engines(cpu_flags()) if e != "brgemm")


@pytest.mark.parametrize("name,fmt,h_q,topk", [
    ("V4.1 FP8", KVCacheFormat.V41_FP8, 128, 2048),
    ("V3.2 FP8", KVCacheFormat.V32_FP8, 128, 2048),
    ("V4.1 FP8 h64", KVCacheFormat.V41_FP8, 64, 2048),
])
def test_bench_brgemm_sparse_decode(bench, monkeypatch, name, fmt, h_q, topk):
    if me.unavailable("brgemm", cpu_flags(), "DJ_HOST_MATRIX") or bf16_engine() != "brgemm":
        pytest.skip("measures the brgemm engine: run where it is available, without forcing another engine")
    b = 16
    q, scopes = _decode_inputs(fmt, b, h_q, topk)
    meta, _ = flash_mla.get_mla_metadata()
    lib = fmla_host.LIB
    ours, other = _OnEngine(lib, "brgemm"), _OnEngine(lib, _other_engine())

    def run(on):
        monkeypatch.setattr(fmla_host, "LIB", on)
        flash_mla.flash_mla_with_kvcache(q, scopes[0].cache, None, None, 512, meta, None, None, False, True,
                                         scopes[0].indices)

    flops = 2 * b * h_q * topk * (fmt.d_qk + 512)
    shape = f"b{b} h{h_q} d{fmt.d_qk} topk{topk}"
    t, mm_seconds, n = Bench.paired_scaled(lambda: run(ours), _matmul, [512, 1024, 2048], reps=7)
    bench.record("flash_mla", f"sparse decode {name} on brgemm", shape, t, flops=flops,
                 baseline=f"torch bf16 matmul n={n}", baseline_seconds=mm_seconds * flops / (2 * 2048 ** 3))
    t, t1 = Bench.paired(lambda: run(ours), lambda: run(other), reps=5)
    bench.record("flash_mla", f"sparse decode {name} on brgemm", shape, t, flops=flops,
                 baseline=f"same op on {_other_engine()}", baseline_seconds=t1)
