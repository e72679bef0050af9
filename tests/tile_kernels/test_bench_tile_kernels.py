"""Benchmarks of the host kernels against the PyTorch reference path, measured in the same run.
Targets (issue 5): casts >= 0.5x copy bandwidth and >= 3x the reference; SwiGLU + cast and the
router >= 3x the reference; expand / reduce >= 0.4x copy bandwidth.

Large outputs come from tile_kernels' output pool: the timed loops drop each output before the
next call, so they measure the steady state (the buffer is reused, already faulted in), as the
copy-bandwidth ceiling does; the casts also record their first call into a fresh buffer."""
import time

import pytest
import torch

import tile_kernels
from tests.testkit.bench_plugin import Bench
from tile_kernels import torch as ref
from tile_kernels._lib import OUTPUTS
from tile_kernels.reference.engram import engram_gate_fwd as ref_engram_gate_fwd
from tile_kernels.testing.generator import generate_topk_idx
from tile_kernels.testing.numeric import count_bytes

pytestmark = pytest.mark.bench
SUITE = "tile_kernels"


@pytest.fixture(autouse=True)
def _host(monkeypatch):
    monkeypatch.setenv("TK_BACKEND", "host")


def _first_call(fn) -> float:
    """Wall time of one call writing into a fresh output (page faults included)."""
    OUTPUTS.clear()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _record_cast(bench, case, shape, fn, inputs, ref_fn):
    """Steady-state time against the reference; against a torch copy moving the same bytes, timed
    alternately with it (the issue's copy-bandwidth share, robust to load from other processes);
    then the first call into a fresh buffer."""
    nbytes = count_bytes(*inputs, fn())
    t_first = _first_call(fn)
    t = bench.time(fn)
    t_ref = bench.time(ref_fn, warmup=1, reps=3)
    bench.record(SUITE, case, shape, t, nbytes=nbytes, baseline="torch reference", baseline_seconds=t_ref)
    src = torch.ones(nbytes // 2, dtype=torch.uint8)
    dst = torch.zeros_like(src)
    t_best, t_copy = bench.paired(fn, lambda: dst.copy_(src), reps=9)
    bench.record(SUITE, case + " vs copy", shape, t_best, nbytes=nbytes, baseline="paired copy, same bytes",
                 baseline_seconds=t_copy)
    bench.record(SUITE, case + " 1st call", shape, t_first, nbytes=nbytes, baseline="steady state",
                 baseline_seconds=t)


@pytest.mark.parametrize("fmt,npc", [("e4m3", 128), ("e2m1", 32)])
def test_per_token_cast_speed(bench, fmt, npc):
    x = torch.randn(4096, 7168, dtype=torch.bfloat16)
    _record_cast(bench, f"per_token_cast bf16->{fmt}", f"4096x7168 npc={npc}",
                 lambda: tile_kernels.quant.per_token_cast(x, fmt, npc), (x,), lambda: ref.cast(x, fmt, (1, npc)))


@pytest.mark.parametrize("fmt,block", [("e4m3", (128, 128)), ("e4m3", (128, 1))])
def test_block_and_channel_cast_speed(bench, fmt, block):
    x = torch.randn(4096, 7168, dtype=torch.bfloat16)
    if block[1] == 1:
        fn, name = lambda: tile_kernels.quant.per_channel_cast(x, fmt, 128), "per_channel_cast"
    else:
        fn, name = lambda: tile_kernels.quant.per_block_cast(x, fmt, block), "per_block_cast"
    _record_cast(bench, f"{name} bf16->{fmt}", f"4096x7168 {block}", fn, (x,), lambda: ref.cast(x, fmt, block))


@pytest.mark.parametrize("fmt,npc", [("e4m3", 128), ("e2m1", 32)])
def test_cast_back_speed(bench, fmt, npc):
    q = tile_kernels.quant.per_token_cast(torch.randn(4096, 7168, dtype=torch.bfloat16), fmt, npc)
    _record_cast(bench, f"cast_back {fmt}->bf16", f"4096x7168 npc={npc}",
                 lambda: tile_kernels.quant.per_token_cast_back(q, "bf16", npc), (q,),
                 lambda: ref.cast_back(q, "bf16", (1, npc)))


def test_swiglu_forward_cast_speed(bench):
    x = torch.randn(8192, 2 * 2048, dtype=torch.bfloat16)
    fn = lambda: tile_kernels.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 128)
    q = fn()
    t = bench.time(fn)
    t_ref = bench.time(lambda: ref.cast(ref.swiglu_forward(x), "e4m3", (1, 128)), warmup=1, reps=3)
    bench.record(SUITE, "swiglu_fwd+per_token_cast", "8192x2*2048", t, nbytes=count_bytes(x, q),
                 baseline="torch reference", baseline_seconds=t_ref)


def test_swiglu_backward_cast_speed(bench):
    rows, hidden, k = 8192, 2048, 8
    idx = torch.arange(rows, dtype=torch.int32)
    w = torch.rand(rows // k, k)
    x = ref.cast(torch.randn(rows, 2 * hidden), "e4m3", (1, 128))
    g = torch.randn(rows, hidden).bfloat16()
    t2p = idx.view(rows // k, k).contiguous()
    fn = lambda: tile_kernels.quant.swiglu_backward_and_per_token_cast(x, g, w, idx, t2p, 128)
    out = fn()
    t = bench.time(fn, warmup=1, reps=3)
    t_ref = bench.time(lambda: ref.swiglu_backward(x, g, w, idx, t2p, 128), warmup=1, reps=3)
    bench.record(SUITE, "swiglu_bwd+per_token_cast", "8192x2*2048", t, nbytes=count_bytes(x, g, out),
                 baseline="torch reference (no cast)", baseline_seconds=t_ref)


def test_router_speed(bench):
    tokens, experts = 8192, 256
    logits, bias = torch.randn(tokens, experts), torch.randn(experts) * 0.1
    args = (logits, bias, 8, 4, 8, False, 0, 2.5, 0, 8, 0, 1, "sigmoid")
    fn = lambda: tile_kernels.moe.top2_sum_gate(*args)
    fn()
    t = bench.time(fn)
    t_ref = bench.time(lambda: ref.top2_sum_gate(*args), warmup=1, reps=3)
    bench.record(SUITE, "top2_sum_gate sigmoid", "8192 tok, 256 exp, 8 grp, top-8", t, baseline="torch reference",
                 baseline_seconds=t_ref)


def _mapping(tokens=8192, k=8, experts=256):
    idx = generate_topk_idx({"num_send_tokens": tokens, "num_topk": k, "num_experts": experts, "num_ep_ranks": 1})
    return tile_kernels.moe.get_fused_mapping(idx, experts, 0, 128)


def test_expand_reduce_speed(bench):
    p2e, _, _, t2p, *_ = _mapping()
    x = torch.randn(t2p.shape[0], 7168, dtype=torch.bfloat16)
    fn = lambda: tile_kernels.moe.expand_to_fused(x, t2p, p2e)
    out = fn()
    t = bench.time(fn, warmup=1, reps=5)
    t_ref = bench.time(lambda: ref.expand_to_fused(x, t2p, p2e), warmup=1, reps=3)
    bench.record(SUITE, "expand_to_fused bf16", f"8192x7168 top-8 -> {p2e.shape[0]} rows", t,
                 nbytes=count_bytes(x, out), baseline="torch reference", baseline_seconds=t_ref)
    w = torch.rand(t2p.shape)
    fn = lambda: tile_kernels.moe.reduce_fused(out, w, t2p)
    red = fn()
    t = bench.time(fn, warmup=1, reps=5)
    # the reference takes ~50 s for all 8192 tokens here: timed on the first tokens that fit the
    # case budget (its cost is linear in tokens), scaled to all of them
    tokens = t2p.shape[0]

    def ref_tokens(n):
        wn, t2pn = w[:n], t2p[:n]
        return (lambda: ref.reduce_fused(out, wn, t2pn)), n

    rate, n = Bench.budgeted_baseline(ref_tokens, [128, 512, tokens], reps=1)
    bench.record(SUITE, "reduce_fused bf16 weighted", f"{p2e.shape[0]} rows -> 8192x7168", t,
                 nbytes=count_bytes(out, red), baseline_seconds=rate * tokens,
                 baseline="torch reference" + ("" if n == tokens else f" on {n} of {tokens} tokens, scaled"))


def test_engram_hash_speed(bench):
    ids = torch.randint(0, 100000, (65536, 3), dtype=torch.int32)
    mult = torch.randint(0, 100000, (2, 3), dtype=torch.int64)
    vocab = torch.randint(100000, 1000000, (2, 2, 8), dtype=torch.int32)
    offsets = ref.engram.make_offsets(vocab)
    fn = lambda: tile_kernels.engram.engram_hash(ids, mult, vocab, offsets)
    fn()
    t = bench.time(fn)
    t_ref = bench.time(lambda: ref.engram.engram_hash_ref(ids, mult, vocab, offsets), warmup=1, reps=3)
    bench.record(SUITE, "engram_hash", "65536 tok, N=3, L=2, M=8", t, baseline="torch reference",
                 baseline_seconds=t_ref)


def test_transpose_speed(bench):
    x = torch.randn(8192, 7168).to(torch.float8_e4m3fn)
    fn = lambda: tile_kernels.transpose.transpose(x)
    out = fn()
    t = bench.time(fn)
    t_ref = bench.time(lambda: x.view(torch.uint8).T.contiguous(), warmup=1, reps=3)
    bench.record(SUITE, "transpose e4m3", "8192x7168", t, nbytes=count_bytes(x, out),
                 baseline="torch .T.contiguous()", baseline_seconds=t_ref)


def test_mhc_pre_big_fuse_speed(bench, monkeypatch):
    from tile_kernels.modeling.mhc.ops import mhc_pre_big_fuse
    tokens, m, hidden = 4096, 4, 4096
    residual = torch.randn(1, tokens, m, hidden).bfloat16()
    fn, scale, base = torch.randn(m * (m + 2), m * hidden) * 1e-4, torch.tensor([0.8, 1.2, 0.5]), torch.randn(24) * 0.1
    args = (residual, fn, scale, base, 1e-6, 1e-6, 1e-6, 2.0, 20)
    fn_host = lambda: mhc_pre_big_fuse(*args)
    out = fn_host()
    t = bench.time(fn_host, warmup=1, reps=5)
    monkeypatch.setenv("TK_BACKEND", "reference")
    t_ref = bench.time(lambda: mhc_pre_big_fuse(*args), warmup=1, reps=3)
    bench.record(SUITE, "mhc_pre_big_fuse (+fp32 projection)", f"{tokens} tok, m=4, H={hidden}", t,
                 nbytes=count_bytes(residual, out), baseline="torch reference ops", baseline_seconds=t_ref)


def _small_op(bench, case, shape, fn, *tensors):
    """Small index ops, timed against the copy-bandwidth bound of the bytes they move ("of peak")."""
    out = fn()
    t = bench.time(fn, warmup=1, reps=5)
    bench.record(SUITE, case, shape, t, nbytes=count_bytes(*tensors, out))


def test_small_moe_ops_speed(bench):
    idx = generate_topk_idx({"num_send_tokens": 8192, "num_topk": 8, "num_experts": 256, "num_ep_ranks": 1})
    w = torch.rand(idx.shape)
    M = tile_kernels.moe
    _small_op(bench, "group_count", "8192x8", lambda: M.group_count(idx, 256), idx)
    _small_op(bench, "aux_fi", "8192x8", lambda: M.aux_fi(idx, 256, 8), idx)
    _small_op(bench, "normalize_weight", "8192x8", lambda: M.normalize_weight(w), w)
    _small_op(bench, "mask_indices_by_tp", "8192x8", lambda: M.mask_indices_by_tp(idx, 256, 8, 1, 2), idx)
    # in place and idempotent: every call scans the same rows (the division stays outside the timing)
    groups = idx // 32
    _small_op(bench, "inplace_unique_group_indices", "8192x8", lambda: M.inplace_unique_group_indices(groups, 8), idx)
    _small_op(bench, "get_fused_mapping", "8192x8, 256 exp", lambda: M.get_fused_mapping(idx, 256, 0, 128)[:7], idx)


def test_e5m6_speed(bench):
    x = torch.randn(4096, 7168, dtype=torch.bfloat16)
    fn = lambda: tile_kernels.quant.per_token_cast(x, "e5m6", 7168)
    q = fn()
    t = bench.time(fn)
    t_ref = bench.time(lambda: ref.cast_to_e5m6(x, 7168), warmup=0, reps=1)
    bench.record(SUITE, "per_token_cast bf16->e5m6", "4096x7168 whole row", t, nbytes=count_bytes(x, q),
                 baseline="torch reference", baseline_seconds=t_ref)


def test_engram_gate_fwd_speed(bench):
    h = torch.randn(4096, 4, 4096).bfloat16()
    k, v, wf = torch.randn(4096, 4, 4096).bfloat16(), torch.randn(4096, 4096).bfloat16(), torch.rand(4, 4096)
    fn = lambda: tile_kernels.engram.engram_gate_fwd(h, k, v, wf, 1e-20, 1e-6)
    out = fn()
    t = bench.time(fn)
    t_ref = bench.time(lambda: ref_engram_gate_fwd(h, k, v, wf, 1e-20, 1e-6), warmup=0, reps=1)
    bench.record(SUITE, "engram_gate_fwd", "4096x4x4096", t, nbytes=count_bytes(h, k, v, out),
                 baseline="torch reference", baseline_seconds=t_ref)


def test_engram_gate_bwd_speed(bench):
    from tile_kernels.reference.engram import engram_gate_bwd as ref_engram_gate_bwd
    h = torch.randn(4096, 4, 4096).bfloat16()
    k, v, wf = torch.randn(4096, 4, 4096).bfloat16(), torch.randn(4096, 4096).bfloat16(), torch.rand(4, 4096)
    g = torch.randn(4096, 4, 4096).bfloat16()
    _, dot, gate, rx, rk = tile_kernels.engram.engram_gate_fwd(h, k, v, wf, 1e-20, 1e-6)
    args = (g, h, k, v, wf, dot, gate, rx, rk, 1e-6)
    fn = lambda: tile_kernels.engram.engram_gate_bwd(*args)
    out = fn()
    t = bench.time(fn, warmup=1, reps=3)
    t_ref = bench.time(lambda: ref_engram_gate_bwd(*args, tile_kernels.get_num_sms()), warmup=0, reps=1)
    bench.record(SUITE, "engram_gate_bwd", "4096x4x4096", t, nbytes=count_bytes(g, h, k, v, out),
                 baseline="torch reference", baseline_seconds=t_ref)


def _launch_floor() -> float:
    """Best time of a host-kernel op on a handful of values (validation + launch): no host kernel
    can beat it, however few bytes it moves."""
    w = torch.rand(1, 8)
    return min(_once(lambda: tile_kernels.moe.normalize_weight(w)) for _ in range(200))


def _once(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _host_and_reference(bench, monkeypatch, case, shape, fn, nbytes):
    """Ops that had only the reference path until they got a host kernel: the host kernel against the
    reference, and (second row) the reference against a host kernel's plausible speed, the
    copy-bandwidth time of the bytes the op must touch or the launch floor when that is longer.
    Issue 5 accepts the reference path only within 1.5x of that bound (ratio >= 0.67)."""
    monkeypatch.setenv("TK_BACKEND", "host")
    t = bench.time(fn, warmup=1, reps=7)
    monkeypatch.setenv("TK_BACKEND", "reference")
    t_ref = bench.time(fn, warmup=1, reps=3)
    monkeypatch.setenv("TK_BACKEND", "host")
    bound = max(nbytes / (bench.peaks.copy_gbs * 1e9), _launch_floor())
    bench.record(SUITE, case, shape, t, nbytes=nbytes, baseline="torch reference", baseline_seconds=t_ref)
    bench.record(SUITE, case + " [ref vs bound]", shape, t_ref, nbytes=nbytes, baseline="bandwidth/launch bound",
                 baseline_seconds=bound)


def test_former_reference_path_ops_speed(bench, monkeypatch):
    """DeepSeek sizes: 8192 tokens, 256 experts in 8 groups; hidden 7168; mHC m = 4; Engram hc = 4.
    fused_weight stays on the reference path: its row shows it within 1.5x of the bound."""
    M = tile_kernels.moe
    scores = torch.randn(8192, 8, 32)
    _host_and_reference(bench, monkeypatch, "topk_sum_and_topk_group_idx", "8192x8x32, top-2 sum, 4 groups",
                        lambda: M.topk_sum_and_topk_group_idx(scores, 2, 4), count_bytes(scores) + 8192 * 4 * 8)
    x4 = ref.cast(torch.randn(4096, 7168), "e2m1", (1, 32), round_sf=True)
    _host_and_reference(bench, monkeypatch, "per_block_cast_lossless e2m1->e4m3", "4096x7168 (1,32)->(128,128)",
                        lambda: tile_kernels.quant.per_block_cast_lossless(x4, "e4m3", (1, 32), (128, 128), round_sf=True),
                        count_bytes(*x4) + 4096 * 7168)
    E = tile_kernels.engram
    wh, we = torch.randn(4, 7168).bfloat16(), torch.randn(4, 7168).bfloat16()
    t_ref = bench.time(lambda: E.fused_weight(wh, we), warmup=1, reps=7)
    nbytes = count_bytes(wh, we) * 2   # both BF16 inputs read, the FP32 product (as many bytes) written
    bench.record(SUITE, "engram fused_weight [ref vs bound]", "4x7168", t_ref, nbytes=nbytes,
                 baseline="bandwidth/launch bound",
                 baseline_seconds=max(nbytes / (bench.peaks.copy_gbs * 1e9), _launch_floor()))
    partial = torch.randn(tile_kernels.get_num_sms(), 4, 7168)
    gwh, gwe = torch.zeros(4, 7168), torch.zeros(4, 7168)
    _host_and_reference(bench, monkeypatch, "engram grad_w_reduce", "4x7168",
                        lambda: E.grad_w_reduce(partial, wh, we, gwh, gwe),
                        count_bytes(partial, wh, we) + 2 * count_bytes(gwh, gwe))
    from tile_kernels.modeling.mhc.ops import expand_to_mhc, mhc_head_compute_mix, mhc_post
    hidden = torch.randn(4096, 7168).bfloat16()
    _host_and_reference(bench, monkeypatch, "mhc expand_to_mhc", "4096x7168, m=4", lambda: expand_to_mhc(hidden, 4),
                        count_bytes(hidden) * 5)
    residual = torch.randn(1, 4096, 4, 7168).bfloat16()
    post, comb = torch.rand(1, 4096, 4, 1), torch.rand(1, 4096, 4, 4)
    with torch.no_grad():
        _host_and_reference(bench, monkeypatch, "mhc_post forward", "4096 tok, m=4, H=7168",
                            lambda: mhc_post(hidden.unsqueeze(0), residual, post, comb),
                            count_bytes(hidden, post, comb) + 2 * count_bytes(residual))
        mix, scale, base = torch.randn(1, 4096, 4), torch.rand(1), torch.randn(4)
        _host_and_reference(bench, monkeypatch, "mhc_head_compute_mix forward", "4096 tok, m=4",
                            lambda: mhc_head_compute_mix(mix, scale, base, 1e-6), 2 * count_bytes(mix))
