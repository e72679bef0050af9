"""`make run`: a tour of the suite. Runs one representative op of each library on CPU, checks it
against the library's reference path and prints time, the torch baseline (the same call on the
plain-PyTorch reference path), throughput and the host matrix engine; then times the stages of the
MoE and DSA layers both ways. Writes the charts to ``build/demo/`` (``ops.png``, ``stages.png``, each
with a ``.txt`` legend). ``--tiny`` runs small shapes (the test's mode). Libraries that have not
landed their CPU path yet are listed as such."""
from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable

import torch

TINY = False          # --tiny: small shapes (the demo's test); set by main
STAGES: dict[str, list[tuple[str, float, float]]] = {}   # layer -> (stage, ours s, baseline s), filled by the tours


def _n(full: int, tiny: int) -> int:
    return tiny if TINY else full


def _time(fn: Callable[[], object], reps: int = 5) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2]


def _timed(fn: Callable[[], object]):
    """(result, seconds) of one call (the baseline paths are slow: one timed run after the checked one)."""
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    return 0.0 if den == 0 else float(1 - 2 * (x * y).sum() / den)


def tour_deepjit():
    import deepjit
    src = r"""
#include <deepjit/host/convert.hpp>
#include <deepjit/host/parallel.hpp>
DJ_KERNEL(tour_to_bf16, "ptr,ptr,i64,i64")
void tour_to_bf16(uint16_t* out, const float* x, int64_t n, int64_t threads) {
    dj::parallel_for(n / 4096, threads, [&](int64_t b) {
        for (int64_t i = b * 4096; i < (b + 1) * 4096; ++i) out[i] = dj::f32_to_bf16(x[i]);
    });
}
"""
    rt = deepjit.Runtime(deepjit.Config(os.path.dirname(os.path.abspath(__file__)), "DEMO"), "host")
    kernel = rt.compile("tour_to_bf16", src)
    x = torch.randn(1 << _n(24, 14))
    out = torch.empty(x.numel(), dtype=torch.bfloat16)
    threads = torch.get_num_threads()
    t = _time(lambda: kernel(out, x, x.numel(), threads))
    base = _time(lambda: x.bfloat16())
    exact = torch.equal(out.view(torch.int16), x.bfloat16().view(torch.int16))
    return "fp32 -> bf16 cast (JIT host kernel)", f"{x.numel()}", t, f"{x.numel() * 6 / t / 1e9:.1f} GB/s", \
        "bit-exact" if exact else "MISMATCH", exact, base


class _forced_backend:
    """Temporarily forces a library onto one path through its ``<PREFIX>_BACKEND`` variable."""

    def __init__(self, prefix: str, backend: str):
        self.name, self.backend = f"{prefix}_BACKEND", backend

    def __enter__(self):
        self.old = os.environ.get(self.name)
        os.environ[self.name] = self.backend

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = self.old


def tour_deep_gemm():
    import deep_gemm
    from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8
    m, n, k = _n(512, 64), _n(2048, 256), _n(2048, 256)
    a = per_token_cast_to_fp8(torch.randn(m, k, dtype=torch.bfloat16), use_ue8m0=False)
    b = per_block_cast_to_fp8(torch.randn(n, k, dtype=torch.bfloat16), use_ue8m0=False)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    t = _time(lambda: deep_gemm.fp8_gemm_nt(a, b, d))
    ref = torch.empty_like(d)
    with _forced_backend("DG", "reference"):
        deep_gemm.fp8_gemm_nt(a, b, ref)
        base = _time(lambda: deep_gemm.fp8_gemm_nt(a, b, ref), reps=1)
    diff = _calc_diff(d, ref)
    return "fp8_gemm_nt (1x128 / 128x128 scales)", f"{m}x{n}x{k}", t, f"{2 * m * n * k / t / 1e12:.3f} TFLOP/s", \
        f"calc_diff {diff:.1e}", diff < 1e-3, base


def tour_tile_kernels():
    from tile_kernels.quant import per_token_cast
    x = torch.randn(_n(4096, 128), _n(7168, 512), dtype=torch.bfloat16)
    out = per_token_cast(x, "e4m3", 128)
    t = _time(lambda: per_token_cast(x, "e4m3", 128))
    with _forced_backend("TK", "reference"):
        ref = per_token_cast(x, "e4m3", 128)
        base = _time(lambda: per_token_cast(x, "e4m3", 128), reps=1)
    exact = all(torch.equal(u.view(torch.uint8), v.view(torch.uint8)) for u, v in zip(out, ref, strict=True))
    nbytes = x.numel() * 3 + x.numel() // 128 * 4
    return "per_token_cast bf16 -> e4m3 (1x128)", "x".join(map(str, x.shape)), t, f"{nbytes / t / 1e9:.1f} GB/s", \
        "bit-exact" if exact else "MISMATCH", exact, base


def tour_flash_mla():
    import flash_mla
    s_q, s_kv, h_q, d_qk, d_v, topk = _n(64, 4), _n(4096, 256), 64, 576, 512, _n(2048, 128)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(s_q, h_q, d_qk, generator=g).bfloat16()
    kv = torch.randn(s_kv, 1, d_qk, generator=g).bfloat16()
    idx = torch.randint(0, s_kv, (s_q, 1, topk), generator=g, dtype=torch.int32)
    scale = d_qk ** -0.5
    out = flash_mla.flash_mla_sparse_fwd(q, kv, idx, scale, d_v)[0]
    t = _time(lambda: flash_mla.flash_mla_sparse_fwd(q, kv, idx, scale, d_v), reps=3)
    with _forced_backend("FMLA", "reference"):
        ref, base = _timed(lambda: flash_mla.flash_mla_sparse_fwd(q, kv, idx, scale, d_v)[0])
    diff = _calc_diff(out, ref)
    flops = 2 * s_q * h_q * topk * (d_qk + d_v)
    return "flash_mla_sparse_fwd (DSA prefill)", f"s_q{s_q} h{h_q} topk{topk}", t, \
        f"{flops / t / 1e12:.3f} TFLOP/s", f"calc_diff {diff:.1e}", diff < 7e-6, base


def _ep_rank(rank: int, world: int, port: int, results, tiny: bool = False) -> None:
    """One rank of the deep_ep tour: dispatch + combine through shared memory, then the same
    through the torch.distributed reference engine; both must agree bit for bit."""
    import torch.distributed as dist
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        import deep_ep
        tokens, hidden, experts, topk = (64, 256, 16, 4) if tiny else (1024, 2048, 64, 8)
        g = torch.Generator().manual_seed(rank)
        x = torch.randn(tokens, hidden, generator=g).bfloat16()
        weights, idx = torch.rand(tokens, experts, generator=g).topk(topk, dim=1)

        def round_trip():
            buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=tokens, hidden=hidden, num_topk=topk,
                                   explicitly_destroy=True)
            recv_x, _, recv_w, handle, _ = buf.dispatch(x, idx, weights, num_experts=experts)
            buf.combine(recv_x, handle, recv_w)  # warm-up: compiles (or loads) every kernel once
            dist.barrier()
            start = time.perf_counter()
            for _ in range(3):
                recv_x, _, recv_w, handle, _ = buf.dispatch(x, idx, weights, num_experts=experts)
                out = buf.combine(recv_x, handle, recv_w)[0]
            seconds = (time.perf_counter() - start) / 3
            buf.destroy()
            return out, recv_x.shape[0], seconds

        out, received, seconds = round_trip()
        with _forced_backend("EP", "reference"):
            ref, _, base = round_trip()
        results.put((rank, torch.equal(out.view(torch.int16), ref.view(torch.int16)), received, seconds, hidden, base))
    except BaseException as exc:  # reported to the parent, which prints it
        results.put((rank, repr(exc), 0, 0.0, 0, 0.0))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def tour_deep_ep():
    import socket

    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    results = ctx.Queue()
    procs = [ctx.Process(target=_ep_rank, args=(r, 2, port, results, TINY)) for r in range(2)]
    for p in procs:
        p.start()
    outs = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    errors = [o[1] for o in outs if not isinstance(o[1], bool)]
    if errors:
        raise RuntimeError(f"deep_ep tour failed: {errors}")
    exact = all(o[1] for o in outs)
    seconds = max(o[3] for o in outs)
    nbytes = sum(o[2] for o in outs) * outs[0][4] * 2 * 2  # received rows, dispatched and combined back
    shape = "64 tok x 256, top-4/16" if TINY else "1024 tok x 2048, top-8/64"
    return "EPBuffer dispatch + combine, 2 local ranks (shm)", shape, seconds, \
        f"{nbytes / seconds / 1e9:.2f} GB/s", "bit-exact vs reference" if exact else "MISMATCH", exact, \
        max(o[5] for o in outs)


class _all_reference:
    """Every library on its plain-PyTorch reference path: the oracle for a whole layer."""

    def __enter__(self):
        self.forced = [_forced_backend(p, "reference") for p in ("DG", "TK", "FMLA", "EP")]
        for f in self.forced:
            f.__enter__()

    def __exit__(self, *exc):
        for f in reversed(self.forced):
            f.__exit__(*exc)


class _stage_timer:
    """Adds up the time spent in named callables while active: each (owner, attribute, stage) is wrapped in
    place (an instance's method or a module's function) and restored on exit."""

    def __init__(self, targets: list[tuple[object, str, str]]):
        self.targets, self.seconds = targets, {stage: 0.0 for _, _, stage in targets}

    def __enter__(self):
        self.saved = []
        for owner, attr, stage in self.targets:
            original = getattr(owner, attr)
            self.saved.append((owner, attr, original, attr in vars(owner)))

            def timed(*args, _fn=original, _stage=stage, **kwargs):
                t = time.perf_counter()
                try:
                    return _fn(*args, **kwargs)
                finally:
                    self.seconds[_stage] += time.perf_counter() - t
            setattr(owner, attr, timed)
        return self

    def __exit__(self, *exc):
        for owner, attr, original, own in reversed(self.saved):
            if own:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)


def _record_stages(layer_name: str, targets, run: Callable[[], object]) -> None:
    """Per-stage seconds of one ``run`` on our paths and on every library's reference path."""
    with _stage_timer(targets) as ours:
        run()
    with _all_reference(), _stage_timer(targets) as base:
        run()
    STAGES[layer_name] = [(stage, ours.seconds[stage], base.seconds[stage]) for stage in ours.seconds]


def tour_moe_layer():
    from deepseek_layers import moe
    from deepseek_layers.moe import MoE, MoEConfig, MoEWeights
    cfg = MoEConfig(hidden=_n(2048, 256), moe_inter_dim=_n(512, 128), n_routed_experts=64, n_activated_experts=6,
                    n_expert_groups=8, n_limited_groups=4, n_shared_experts=2, route_scale=2.5)
    layer = MoE(cfg, MoEWeights.random(cfg))
    x = torch.randn(_n(512, 32), cfg.hidden, generator=torch.Generator().manual_seed(0)).bfloat16()
    y = layer(x)
    t = _time(lambda: layer(x), reps=3)
    with _all_reference():
        ref, base = _timed(lambda: layer(x))
    _record_stages("MoE layer", [(layer, "route", "router (gate, top-k)"), (moe, "per_token_cast", "FP8 cast of x"),
                                 (moe, "get_fused_mapping", "fused mapping"),
                                 (moe, "expand_to_fused_with_sf", "expand to experts"),
                                 (layer, "_experts", "expert GEMMs + SwiGLU"), (moe, "reduce_fused", "weighted reduce"),
                                 (layer, "shared_expert", "shared experts")], lambda: layer(x))
    layer.destroy()
    diff = _calc_diff(y, ref)
    flops = 2 * x.shape[0] * 3 * cfg.hidden * cfg.moe_inter_dim * (cfg.n_activated_experts + cfg.n_shared_experts)
    # Host and reference GEMMs round their BF16 outputs differently; the next FP8 cast can then
    # land one code apart, so the layers agree to FP8 noise, not bit for bit.
    return "MoE layer (router, FP8 grouped GEMMs, SwiGLU cast)", f"{x.shape[0]} tok, h{cfg.hidden}, top-6/64", t, \
        f"{flops / t / 1e12:.3f} TFLOP/s", f"calc_diff {diff:.1e} vs all-reference", diff < 1e-3, base


def tour_eplb():
    """EPLB on a skewed router, on one process: the rows each of 4 expert-parallel ranks would
    receive (the physical slots it would hold) before and after applying the plan."""
    from deepseek_layers.eplb import ExpertPlan, rebalance_experts
    from deepseek_layers.moe import MoE, MoEConfig, MoEWeights
    cfg = MoEConfig(hidden=512, moe_inter_dim=256, n_routed_experts=32, n_activated_experts=4, n_expert_groups=8,
                    n_limited_groups=4)
    weights = MoEWeights.random(cfg)
    weights.gate_bias[:8] += 0.4  # popular experts, all on rank 0 in the plain layout
    x = torch.randn(256, cfg.hidden, generator=torch.Generator().manual_seed(0)).bfloat16()
    ranks, slots = 4, 40
    layer = MoE(cfg, weights)
    y = layer(x)
    before = layer.local_expert_recv_stats.view(ranks, -1).sum(1)
    load = layer.expert_load()
    t = _time(lambda: rebalance_experts(load[None], slots, cfg.n_expert_groups, 1, ranks), reps=3)
    layer.apply_plan(ExpertPlan.from_rebalance(rebalance_experts(load[None], slots, cfg.n_expert_groups, 1, ranks)),
                     weights)
    exact = torch.equal(layer(x).view(torch.int16), y.view(torch.int16))
    after = layer.local_expert_recv_stats.view(ranks, -1).sum(1)
    loads = f"rows/rank {before.tolist()} -> {after.tolist()}"
    return "EPLB rebalance_experts + MoE with the plan", f"{cfg.n_routed_experts} experts -> {slots} slots, " \
        f"{ranks} ranks", t, loads, "output bit-exact" if exact else "MISMATCH", \
        exact and bool(after.max() < before.max()), None


def tour_dsa_layer():
    import deep_gemm
    import flash_mla
    from deepseek_layers.dsa import DSA, DSACache, DSAConfig, DSAWeights
    cfg = DSAConfig(dim=_n(2048, 256), q_lora_rank=_n(512, 128), n_heads=64, index_n_heads=64, index_head_dim=128,
                    index_topk=_n(512, 64))
    layer = DSA(cfg, DSAWeights.random(cfg))
    g = torch.Generator().manual_seed(0)
    batch, context = _n(4, 2), _n(512, 96)
    cache = DSACache(cfg, batch=batch, max_seq_len=context + 16)
    for i in range(batch):
        layer.prefill(torch.randn(context, cfg.dim, generator=g).bfloat16(), cache, seq=i)
    step = torch.randn(batch, cfg.dim, generator=g).bfloat16()
    y = layer.decode(step, copy.deepcopy(cache))
    with _all_reference():
        ref, base = _timed(lambda: layer.decode(step, copy.deepcopy(cache)))
    t = _time(lambda: layer.decode(step, cache), reps=5)  # each step appends one token: near-equal work
    _record_stages("DSA decode", [(layer, "_project", "projections (q, latent, indexer q/k)"),
                                  (deep_gemm, "fp8_paged_mqa_logits", "indexer logits (FP8 paged MQA)"),
                                  (layer, "_select", "top-k select"),
                                  (flash_mla, "flash_mla_with_kvcache", "sparse MLA decode"),
                                  (layer, "_output", "output projection")],
                   lambda: layer.decode(step, copy.deepcopy(cache)))
    diff = _calc_diff(y, ref)
    return "DSA layer decode (indexer, top-k, sparse MLA)", f"b{batch} ctx{context} top-{cfg.index_topk}", t, \
        f"{t / batch * 1e6:.0f} us/token", f"calc_diff {diff:.1e} vs all-reference", diff < 1e-3, base


TOUR: list[tuple[str, Callable[[], tuple | None]]] = [
    ("deepjit", tour_deepjit), ("deep_gemm", tour_deep_gemm), ("tile_kernels", tour_tile_kernels),
    ("flash_mla", tour_flash_mla), ("deep_ep", tour_deep_ep),
    ("deepseek_layers", tour_moe_layer), ("deepseek_layers", tour_eplb), ("deepseek_layers", tour_dsa_layer),
]


def matrix_engine() -> str:
    """The host kernels' matrix engine (deepjit's choice for this CPU, or the one DG_/DJ_HOST_MATRIX forces); where
    it is avx512bf16, deep_gemm's dense E4M3 GEMMs of 12-512 rows run on brgemm (``deep_gemm.host.gemm_engine``)."""
    from deepjit.backends.host import matrix_engine as engines
    from deepjit.backends.host.toolchain import cpu_identity
    from deepjit.env import Env
    env = Env("DG")
    return engines.choose(env, cpu_identity()[1], env.get_str("JIT_HOST_MARCH", "native")).engine


HEADER = ("library", "op", "shape", "time", "torch baseline", "speed-up", "throughput", "engine", "check")


def _write_charts(out_dir: str, op_rows: list[tuple[str, float, float | None]]) -> list[str]:
    from deepseek_layers.png_chart import bar_chart
    os.makedirs(out_dir, exist_ok=True)
    charts = [("ops", "per-op time on this CPU vs the torch baseline", op_rows)]
    stage_rows = [(f"{layer}: {stage}", ours, base) for layer, stages in STAGES.items() for stage, ours, base in stages]
    if stage_rows:
        charts.append(("stages", "MoE / DSA layer stages, ours vs all libraries on the torch reference", stage_rows))
    written = []
    for name, title, rows in charts:
        png, legend = bar_chart(rows, title)
        for suffix, data, mode in ((".png", png, "wb"), (".txt", legend, "w")):
            with open(os.path.join(out_dir, name + suffix), mode) as f:
                f.write(data)
        written.append(os.path.join(out_dir, name + ".png"))
    return written


def main(argv: list[str] | None = None) -> int:
    import argparse
    global TINY
    parser = argparse.ArgumentParser(prog="python -m deepseek_layers.demo")
    parser.add_argument("--tiny", action="store_true", help="small shapes (seconds, not minutes)")
    parser.add_argument("--out", default=os.path.join("build", "demo"), help="where the charts go")
    args = parser.parse_args(argv)
    TINY = args.tiny
    STAGES.clear()
    engine = matrix_engine()
    rows, chart_rows, ok = [], [], True
    for lib, fn in TOUR:
        try:
            op, shape, seconds, throughput, check, passed, base = fn()
        except (ImportError, AttributeError, NotImplementedError) as exc:
            rows.append((lib, "not yet implemented on CPU", "-", "-", "-", "-", "-", "-", type(exc).__name__))
            continue
        ok &= passed
        speed_up = "-" if base is None else f"{base / seconds:.2f}x"
        rows.append((lib, op, shape, f"{seconds * 1e3:.3f} ms", "-" if base is None else f"{base * 1e3:.3f} ms",
                     speed_up, throughput, engine, check))
        chart_rows.append((f"{lib}: {op}", seconds, base))
    widths = [max(len(str(r[i])) for r in rows + [HEADER]) for i in range(len(HEADER))]
    for r in [HEADER] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    for layer, stages in STAGES.items():
        print(f"\n{layer} stages (ours / torch baseline):")
        for stage, ours, base in stages:
            print(f"  {stage:40s} {ours * 1e3:9.3f} ms  {base * 1e3:9.3f} ms")
    for path in _write_charts(args.out, chart_rows):
        print(f"chart: {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
