"""Benchmarks (``make bench``): dispatch/combine bandwidth at 4096 tokens per rank, hidden 7168,
top-8 of 256 experts, FP8 dispatch, BF16 combine, on 2 and 4 local ranks; the baseline is a gloo
``all_to_all_single`` moving the same bytes in the same run. Bytes are counted as upstream counts
them: received tokens (local ones included) x bytes per token of everything dispatch returns.
Also recorded: the copy-bandwidth bound on the ratio to gloo (its "vs baseline" column; it uses
the copy bandwidth measured in the same run, which a loaded machine depresses). Low-latency mode
(128 tokens per rank, V1 ``Buffer``): best microseconds per dispatch and per combine."""
import statistics
import time

import pytest
import torch
import torch.distributed as dist

from tests.testkit.distributed import run_ranks

from . import refs

H, E, K = 7168, 256, 8


def _timed(fn, reps):
    """Best wall time over ``reps`` calls, every rank starting together (a barrier before each)."""
    best = float("inf")
    for _ in range(reps):
        dist.barrier()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _timed_keeping(fn, reps, keep):
    """``_timed`` while the caller holds the last ``keep`` results (dropped outside the timed call)."""
    best, alive = float("inf"), []
    for _ in range(reps):
        dist.barrier()
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
        alive = [*alive, out][-keep:] if keep else []
        out = None
    return best


def _alternating(fn, baseline, reps):
    """``Bench.paired`` for collectives: op and baseline alternate, each after a barrier; the best
    time of each is kept, so a load spike on this shared machine slows both or neither."""
    fn(), baseline()
    best, best_base = float("inf"), float("inf")
    for _ in range(reps):
        best = min(best, _timed(fn, 1))
        best_base = min(best_base, _timed(baseline, 1))
    return best, best_base


def _normal(rank, world, M, reps):
    import deep_ep
    from deep_ep.utils.math import per_token_cast_to_fp8
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K, use_fp8_dispatch=True,
                           explicitly_destroy=True)
    idx, w = refs.make_routing(M, K, E, seed=rank, masked_ratio=0.0)
    x = per_token_cast_to_fp8(refs.make_x(M, H, seed=rank))
    recv_x, recv_idx, recv_w, handle, _ = buf.dispatch(x, idx, w, num_experts=E)
    n = recv_x[0].shape[0]
    y = torch.randn(n, H).bfloat16()
    per_token = H + recv_x[1].shape[1] * 4 + K * 8 + K * 4
    dispatch_bytes = n * per_token
    combine_bytes = n * (H * 2 + K * 4)
    # Baseline: gloo all-to-all of the same bytes with the same per-destination split.
    owner = torch.where(idx >= 0, idx // (E // world), -1)
    send = [int((owner == d).any(1).sum()) for d in range(world)]
    recv = torch.empty(world, dtype=torch.int64)
    dist.all_to_all_single(recv, torch.tensor(send))
    recv = recv.tolist()
    gloo = {}
    for name, width in (("dispatch", per_token), ("combine", H * 2 + K * 4)):
        src = torch.empty(sum(send) * width, dtype=torch.uint8)
        dst = torch.empty(sum(recv) * width, dtype=torch.uint8)
        out_splits, in_splits = [r * width for r in recv], [s * width for s in send]
        gloo[name] = lambda d=dst, s=src, o=out_splits, i=in_splits: dist.all_to_all_single(d, s, o, i)
    t_dispatch, t_gloo_dispatch = _alternating(lambda: buf.dispatch(x, idx, w, num_experts=E), gloo["dispatch"], reps)
    t_combine, t_gloo_combine = _alternating(lambda: buf.combine(y, handle, recv_w), gloo["combine"], reps)
    buf.destroy()
    return dict(transport=buf.transport, t_dispatch=t_dispatch, t_combine=t_combine, dispatch_bytes=dispatch_bytes,
                combine_bytes=combine_bytes, t_gloo_dispatch=t_gloo_dispatch, t_gloo_combine=t_gloo_combine,
                tokens=M, recv_tokens=n)


def _low_latency(rank, world, M, reps):
    import deep_ep
    buf = deep_ep.Buffer(dist.group.WORLD, 0, deep_ep.Buffer.get_low_latency_rdma_size_hint(M, H, world, E),
                         low_latency_mode=True, explicitly_destroy=True)
    idx, w = refs.make_routing(M, K, E, seed=rank, masked_ratio=0.0)
    x = refs.make_x(M, H, seed=rank)
    recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, M, E, use_fp8=True)
    y = torch.randn(E // world, world * M, H).bfloat16()
    t_dispatch = _timed(lambda: buf.low_latency_dispatch(x, idx, M, E, use_fp8=True), reps)
    t_combine = _timed(lambda: buf.low_latency_combine(y, idx, w, handle), reps)
    buf.destroy()
    return dict(t_dispatch=t_dispatch, t_combine=t_combine)


@pytest.mark.bench
@pytest.mark.parametrize("world", [2, 4])
def test_bench_dispatch_combine(bench, world):
    outs = run_ranks(_normal, world, 4096, 5, timeout=900)
    shape = f"EP{world} 4096x7168 top8/256"
    for op in ("dispatch", "combine"):
        # Per rank, as upstream reports it; every rank runs at once on this machine's cores.
        seconds = statistics.median(o[f"t_{op}"] for o in outs)
        nbytes = statistics.median(o[f"{op}_bytes"] for o in outs)
        base = statistics.median(o[f"t_gloo_{op}"] for o in outs)
        bench.record("deep_ep", f"{op} {'fp8' if op == 'dispatch' else 'bf16'} per rank ({outs[0]['transport']})",
                     shape, seconds, nbytes=nbytes, baseline="gloo all_to_all_single", baseline_seconds=base)
        # All ranks together, the figure comparable with this machine's copy bandwidth.
        total = sum(o[f"{op}_bytes"] for o in outs)
        gloo_all = max(o[f"t_gloo_{op}"] for o in outs)
        bench.record("deep_ep", f"{op} all {world} ranks together", shape, max(o[f"t_{op}"] for o in outs),
                     nbytes=total, baseline="gloo all_to_all_single", baseline_seconds=gloo_all)
        # The copy-bandwidth bound on the gloo ratio: the least time in which the ranks, sharing
        # the machine's copy bandwidth, read and write what the operation must move; its ratio
        # column is the highest ratio to gloo any implementation could reach here. All ranks
        # together, like the row above (every rank's own traffic: routing makes them differ).
        seconds_min = sum(_min_traffic(op, o) for o in outs) / (bench.peaks.copy_gbs * 1e9)
        bench.record("deep_ep", f"{op} bound at copy bandwidth", shape, seconds_min, nbytes=total,
                     baseline="gloo all_to_all_single", baseline_seconds=gloo_all)


def _min_traffic(op: str, o: dict) -> float:
    """Bytes one rank must read plus write: dispatch reads its tokens once (a token's copies to
    several ranks come from cache) and the rows it receives are written once (by their sources);
    combine reads each received expert-output row once (where it is reduced) and writes its
    tokens' combined rows."""
    if op == "dispatch":
        per_token = o["dispatch_bytes"] / o["recv_tokens"]
        return o["tokens"] * per_token + o["dispatch_bytes"]
    return o["combine_bytes"] + o["tokens"] * H * 2


def _results_alive(rank, world, M, reps, keep):
    """BF16 dispatch and combine, results dropped at once vs the last ``keep`` held (after a
    warm-up of ``keep + 1`` calls, which is how many buffers holding them takes)."""
    import deep_ep
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K, explicitly_destroy=True)
    idx, w = refs.make_routing(M, K, E, seed=rank, masked_ratio=0.0)
    x = refs.make_x(M, H, seed=rank)
    out = {}

    def dispatch():
        return buf.dispatch(x, idx, w, num_experts=E)

    out["t_dispatch"] = _timed_keeping(dispatch, reps, 0)
    out["t_dispatch_alive"] = _timed_keeping(dispatch, reps + keep + 1, keep)
    # The combine's handle holds its dispatch's outputs: the dispatch rows above held no more.
    recv_x, _, recv_w, handle, _ = dispatch()
    y = recv_x.clone()
    out["t_combine"] = _timed_keeping(lambda: buf.combine(y, handle, recv_w), reps, 0)
    out["t_combine_alive"] = _timed_keeping(lambda: buf.combine(y, handle, recv_w), reps + keep + 1, keep)
    recv_x = recv_w = handle = None
    buf.destroy()
    return out


@pytest.mark.bench
def test_bench_results_alive(bench):
    keep = 3
    outs = run_ranks(_results_alive, 2, 4096, 5, keep, timeout=900)
    for op in ("dispatch", "combine"):
        # Ratio: steady time / time with results held (1 = no slowdown; the target is >= 0.67).
        bench.record("deep_ep", f"{op} bf16 with {keep} results alive", "EP2 4096x7168 top8/256",
                     max(o[f"t_{op}_alive"] for o in outs), baseline="same, results released at once",
                     baseline_seconds=max(o[f"t_{op}"] for o in outs))


@pytest.mark.bench
@pytest.mark.parametrize("world", [2, 4])
def test_bench_low_latency(bench, world):
    outs = run_ranks(_low_latency, world, 128, 20, timeout=600)
    for op in ("dispatch", "combine"):
        bench.record("deep_ep", f"low-latency {op} ({'fp8' if op == 'dispatch' else 'bf16'})",
                     f"EP{world} 128x7168 top8/256", statistics.median(o[f"t_{op}"] for o in outs))


def _build(rank, world, nbytes):
    import os

    import deep_ep
    dist.barrier()
    start = time.perf_counter()
    buf = deep_ep.Buffer(dist.group.WORLD, nbytes, explicitly_destroy=True)
    seconds = time.perf_counter() - start
    committed = os.fstat(buf._ep._session.transport.window._own_fd).st_blocks * 512
    buf.destroy()
    return seconds, committed


@pytest.mark.bench
def test_bench_build_1gib_buffer(bench):
    """A V1 ``Buffer`` with vLLM's default 1 GiB ``num_nvl_bytes`` on 2 local ranks: construction
    time per rank (the slowest rank) and the shared memory it commits (the README's budget)."""
    outs = run_ranks(_build, 2, 1 << 30, timeout=600)
    committed = max(c for _, c in outs)
    bench.record("deep_ep", f"V1 Buffer construction, 1 GiB (commits {committed / (1 << 30):.2f} GiB per rank)",
                 "EP2 num_nvl_bytes=2^30", max(s for s, _ in outs))
