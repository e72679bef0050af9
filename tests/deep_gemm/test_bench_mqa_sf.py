"""Speed of host MQA logits (vs torch BF16 matmul throughput) and scale transforms (vs copy bandwidth).

Targets (issue 4): MQA logits >= 0.6x torch BF16 matmul throughput on 2*S*S_kv*H*D FLOPs;
scale transforms >= 0.5x the copy bandwidth measured in the same run. Op and baseline are timed
alternately, best of each (Bench.paired; the MQA baseline on fewer rows where the full matmul would
overrun the case budget, scaled and labelled)."""
import pytest
import torch

from deep_gemm import host as H
from tests.testkit.bench_plugin import Bench

pytestmark = pytest.mark.bench


def test_bench_mqa_logits(bench):
    s, s_kv, h, d = 4096, 8192, 64, 128
    q = torch.randn(s, h, d).to(torch.float8_e4m3fn)
    kv = torch.randn(s_kv, d).to(torch.float8_e4m3fn)
    kv_sf = torch.rand(s_kv) + 0.5
    w = torch.randn(s, h)
    ks = torch.zeros(s, dtype=torch.int32)
    ke = torch.full((s,), s_kv, dtype=torch.int32)
    logits = torch.empty(s, s_kv)
    qb, kvb = torch.randn(s * h, d).bfloat16(), torch.randn(s_kv, d).bfloat16()

    # the baseline is one BF16 matmul of the same FLOPs (into a preallocated output, 4 GB at full
    # size); where that overruns the budget it runs on fewer rows, its time scaled (Bench.paired_scaled)
    def matmul(rows):
        out = torch.empty(rows, s_kv, dtype=torch.bfloat16)
        return (lambda: torch.matmul(qb[:rows], kvb.T, out=out)), 2 * rows * s_kv * d

    t, t0, rows = Bench.paired_scaled(lambda: H.mqa_logits(q, None, kv, kv_sf, w, ks, ke, logits), matmul,
                                      [s * h // 16, s * h // 4, s * h], 2)
    bench.record("deep_gemm", "fp8_mqa_logits", f"{s}x{s_kv}x{h}x{d}", t, flops=2 * s * s_kv * h * d,
                 baseline="torch bf16 matmul, same flops" + ("" if rows == s * h else f" (scaled from {rows} rows)"),
                 baseline_seconds=t0)


def test_bench_paged_mqa_logits(bench):
    b, h, d, block_kv, ctx = 64, 64, 128, 64, 8192
    pages = ctx // block_kv
    cache = torch.randint(0, 120, (b * pages, block_kv * (d + 4)), dtype=torch.uint8)
    cache.view(b * pages, block_kv * (d + 4))[:, block_kv * d:].view(torch.float32).fill_(0.5)
    cache = cache.view(b * pages, block_kv, 1, d + 4)
    q = torch.randn(b, 1, h, d).to(torch.float8_e4m3fn)
    w = torch.randn(b, h)
    lens = torch.full((b, 1), ctx, dtype=torch.int32)
    table = torch.arange(b * pages, dtype=torch.int32).view(b, pages)
    logits = torch.empty(b, ctx)
    qb, kvb = torch.randn(h, d).bfloat16(), torch.randn(ctx, d).bfloat16()
    t, t0 = Bench.paired(lambda: H.paged_mqa_logits(q, None, cache, w, lens, table, logits),
                   lambda: [qb @ kvb.T for _ in range(b)], 5)
    bench.record("deep_gemm", "fp8_paged_mqa_logits", f"{b}x{ctx}x{h}x{d}", t, flops=2 * b * ctx * h * d,
                 baseline="torch bf16 matmul per batch row", baseline_seconds=t0)


# Scale tensors of real problems: a 4096-token prefill's activations (4096 x 7168 / 128), the
# 8 x 512-row MoE groups (the same 4096 rows), an 8192-token prefill and a 64k-token batch.
@pytest.mark.parametrize("mn,sk", [(4096, 56), (8192, 56), (65536, 56)])
def test_bench_sf_pack(bench, mn, sk):
    sf = torch.exp2(torch.randint(-20, 10, (mn, sk)).float())
    words = -(-sk // 4)
    out = torch.empty(words, mn, dtype=torch.int32).T
    nbytes = sf.numel() * 4 + out.numel() * 4
    src, dst = torch.empty(nbytes // 8, dtype=torch.int32), torch.empty(nbytes // 8, dtype=torch.int32)
    t, t0 = Bench.paired(lambda: H.pack_sf_ue8m0(sf, out), lambda: dst.copy_(src), 51)
    bench.record("deep_gemm", "sf -> packed ue8m0 mn-major", f"{mn}x{sk}", t, nbytes=nbytes,
                 baseline="torch copy, same bytes", baseline_seconds=t0)
    tt = torch.empty(sk, mn).T
    nb = sf.numel() * 8
    src2, dst2 = torch.empty(nb // 8), torch.empty(nb // 8)
    t1, t2 = Bench.paired(lambda: H.transpose_sf(sf, tt), lambda: dst2.copy_(src2), 51)
    bench.record("deep_gemm", "sf -> fp32 mn-major", f"{mn}x{sk}", t1, nbytes=nb,
                 baseline="torch copy, same bytes", baseline_seconds=t2)
