"""Runs TileLang's FlashMLA prefill port for the Ascend 950 (tile-ai/tilelang ``examples/ascend/flashmla``,
the kernel whose 950 time ``RESULTS.md`` publishes) on deepjit's twin and prints the timeline estimate
(an estimate, never a measurement) beside a check of its outputs against a torch reference.

The port is not in this repository: pass a checkout that holds ``examples/ascend/flashmla/manual.py``
(its ``prefill(nq, nk, topk)`` and ``core.PASS_CONFIG``). Not part of ``make test`` (it needs that
checkout); the validation table in deepjit/README.md quotes its figures.

    DJ_TWIN_ALLOW_UNPAIRED_FLAGS=1 python tools/flashmla_port_timeline.py --tilelang-root PATH \\
        --nq 4096 --nk 8192 --topk 640

The port ends with pre-armed flags never waited on, hence DJ_TWIN_ALLOW_UNPAIRED_FLAGS=1. Its grid is
min(nq, 32) blocks, each running ceil(nq / 32) queries (64 heads, ``topk / 64`` steps each): nq = 32 * n
gives every block the per-core work of n queries, and the whole published shape (nq 4096) runs on the
twin in a few minutes on two CPU cores.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tilelang-root", required=True, help="a tile-ai/tilelang checkout with examples/ascend/flashmla")
    parser.add_argument("--nq", type=int, default=4096)
    parser.add_argument("--nk", type=int, default=8192)
    parser.add_argument("--topk", type=int, default=640)
    parser.add_argument("--no-check", action="store_true", help="skip the comparison with the torch reference")
    args = parser.parse_args()
    if os.environ.get("DJ_TWIN_ALLOW_UNPAIRED_FLAGS") != "1":
        parser.error("set DJ_TWIN_ALLOW_UNPAIRED_FLAGS=1 (the port leaves pre-armed flags set)")
    sys.path.insert(0, os.path.abspath(args.tilelang_root))

    import tilelang
    import torch
    import tvm
    from examples.ascend.flashmla.core import PASS_CONFIG
    from examples.ascend.flashmla.manual import prefill

    from deepjit.backends.ascend_twin import timeline
    from deepjit.tilelang_route.ascend_check import l2_modelled
    from deepjit.tilelang_route.twin import run_on_twin

    # the port's own pass configuration (no AutoSchedule), which tilelang.compile would get
    lower = tilelang.lower

    def lower_with_config(*a, **k):
        with tvm.transform.PassContext(config={getattr(key, "value", key): v for key, v in PASS_CONFIG.items()}):
            return lower(*a, **k)

    tilelang.lower = lower_with_config

    nq, nk, topk = args.nq, args.nk, args.topk
    g = torch.Generator().manual_seed(0)
    q = (torch.randn(nq, 64, 512, generator=g) / 10).bfloat16()
    kv = (torch.randn(nk, 512, generator=g) / 10).bfloat16()
    idx = torch.stack([torch.randperm(nk, generator=g)[:topk] for _ in range(nq)]).int()
    sink = torch.randn(64, generator=g)
    lengths = torch.full((nq,), topk, dtype=torch.int32)
    out, mx, lse = torch.zeros(nq, 64, 512).bfloat16(), torch.zeros(nq, 64), torch.zeros(nq, 64)
    start = time.perf_counter()
    with l2_modelled(), timeline.recording():
        result = run_on_twin(prefill(nq, nk, topk), q, kv, idx, sink, lengths, out, mx, lse)
    est = result.estimate()
    print(f"twin run {time.perf_counter() - start:.0f} s")
    print(est.summary())
    flops = 4 * nq * 64 * topk * 512
    print(f"{est.seconds * 1e6:.1f} us, {flops / est.seconds / 1e12:.1f} TFLOP/s (estimate)")
    if not args.no_check:
        # the first 32 queries (all of them would gather [nq, top-k, 512] FP32 rows: 5.4 GB at the default shape)
        n = min(nq, 32)
        scale = 512 ** -0.5
        rows = kv.float()[idx[:n].long()]
        s = torch.einsum("qhd,qkd->qhk", q[:n].float(), rows) * scale
        ref_lse = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.logaddexp(ref_lse, sink)[..., None])
        ref = torch.einsum("qhk,qkd->qhd", p, rows)
        print(f"first {n} queries: max |out - ref| {(out[:n].float() - ref).abs().max().item():.2e}, "
              f"max |max - ref| {(mx[:n] - s.amax(-1)).abs().max().item():.2e}, "
              f"max |lse - ref| {(lse[:n] - ref_lse).abs().max().item():.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
