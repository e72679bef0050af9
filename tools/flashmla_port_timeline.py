"""Runs TileLang's FlashMLA port for the Ascend 950 (tile-ai/tilelang ``examples/ascend/flashmla``,
the kernels whose 950 times ``RESULTS.md`` publishes) on deepjit's twin and prints the timeline
estimate (an estimate, never a measurement) beside a check of its outputs against a torch reference.

The port is not in this repository: pass a checkout that holds ``examples/ascend/flashmla/`` (prefill:
``manual.py``'s ``prefill(nq, nk, topk)``; decode: ``decode.py``'s ``prepare_decode``; both
``core.PASS_CONFIG``). Not part of ``make test`` (it needs that checkout); the validation table in
deepjit/README.md quotes its figures.

    DJ_TWIN_ALLOW_UNPAIRED_FLAGS=1 python tools/flashmla_port_timeline.py --tilelang-root PATH \\
        --nq 4096 --nk 8192 --topk 640
    DJ_TWIN_ALLOW_UNPAIRED_FLAGS=1 python tools/flashmla_port_timeline.py --tilelang-root PATH \\
        --decode --batch 64 --sq 4 --extra fp8

The port ends with pre-armed flags never waited on, hence DJ_TWIN_ALLOW_UNPAIRED_FLAGS=1. Its grid is
min(nq, 32) blocks, each running ceil(nq / 32) queries (64 heads, ``topk / 64`` steps each): nq = 32 * n
gives every block the per-core work of n queries, and the whole published shape (nq 4096) runs on the
twin in a few minutes on two CPU cores.

Decode (``--decode``) is RESULTS.md's decode table: V4.1 FP8 main cache (``--seq`` tokens per request,
top-k 128) plus an FP8 or FP4 extra cache (``--extra-seq`` tokens, top-k 512), nq = batch * sq query
rows of 64 heads, attention sinks, fixed top-k (no length tensors), every index a valid token of its
request; ``--varlen`` draws each request's lengths as the published cases did (FlashMLA's tests'
``is_varlen``), so a short request's rows end in -1 indices. ``prepare_decode`` derives the kernel (token count, strides, cache hint) from duck-typed
FlashMLA test inputs; the PrimFunc it would hand to ``tilelang.compile`` runs on the twin instead.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from types import SimpleNamespace


def decode_case(b, sq, seq, extra_seq, extra, varlen=False, topk=128, extra_topk=512):
    """(PrimFunc, twin arguments, reference inputs) of one decode case, built like FlashMLA's tests."""
    import random

    import tilelang
    import torch
    from examples.ascend.flashmla.decode import prepare_decode

    from flash_mla._operands import KVCacheFormat
    from flash_mla.kv_cache import quantize_k_cache

    g, rnd = torch.Generator().manual_seed(0), random.Random(0)
    nq = b * sq

    def scope(fmt, seq, page, k):
        # ``seq`` tokens a request (varlen: max(N(seq, seq / 2), sq) as FlashMLA's tests, each request's
        # pages padded to a multiple of 4 past the longest and all pages shuffled); each query row picks
        # k distinct tokens of its request, -1 past a short request's length
        lens = [int(max(rnd.normalvariate(seq, seq / 2), sq)) if varlen else seq for _ in range(b)]
        pad = -(-max(lens) // (4 * page)) * 4 * page if varlen else seq
        pages = b * pad // page
        table = (torch.randperm(pages, generator=g) if varlen else torch.arange(pages)).view(b, -1)
        cache = quantize_k_cache((torch.randn(pages, page, 1, 512, generator=g) / 10).bfloat16(), fmt, "interleaved")
        idx = torch.full((nq, k), -1, dtype=torch.int32)
        for r in range(nq):
            pos = torch.randperm(lens[r // sq], generator=g)[:k]
            idx[r, :len(pos)] = table[r // sq, pos // page] * page + pos % page
        return SimpleNamespace(get_kvcache_for_flash_mla=lambda: cache, topk_length=None,
                               indices_in_kvcache=idx.view(b, sq, k), fmt=fmt)

    fmt = {"fp8": KVCacheFormat.V41_FP8, "fp4": KVCacheFormat.V41_FP4}[extra]
    main, ext = scope(KVCacheFormat.V41_FP8, seq, 256, topk), scope(fmt, extra_seq, 64, extra_topk)
    q = torch.randn(b, sq, 64, 512, generator=g).clamp(-1, 1).bfloat16()
    sink = torch.randn(64, generator=g)
    mask = torch.randn(64, generator=g)
    sink[mask > 0.5], sink[mask < -0.5] = float("inf"), float("-inf")  # as FlashMLA's tests
    inputs = SimpleNamespace(q=q, kv_scope=main, extra_kv_scope=ext, attn_sink=sink, sm_scale=512 ** -0.5)
    param = SimpleNamespace(decode=SimpleNamespace(b=b), s_q=sq, topk=topk, have_attn_sink=True)
    captured = {}
    compile_ = tilelang.compile
    tilelang.compile = lambda func, **kw: captured.setdefault("func", func)
    try:
        prepare_decode(param, inputs)
    finally:
        tilelang.compile = compile_
    caches = [s.get_kvcache_for_flash_mla().view(torch.uint8).view(-1) for s in (main, ext)]
    idx = [s.indices_in_kvcache.reshape(nq, -1) for s in (main, ext)]
    lengths = [torch.full((nq,), k, dtype=torch.int32) for k in (topk, extra_topk)]
    out, lse = torch.zeros(nq, 64, 512).bfloat16(), torch.zeros(nq, 64)
    args = (q.view(nq, 64, 512), caches[0], idx[0], sink, lengths[0], caches[1], idx[1], lengths[1], out, lse)
    return captured["func"], args, (q.view(nq, 64, 512), [(caches[0], main.fmt, idx[0]), (caches[1], fmt, idx[1])],
                                    sink, out, lse)


def check_decode(ref_inputs):
    """Compares every query row's decode output and LSE with a torch reference over the dequantised
    records (32 rows at a time)."""
    import torch

    from flash_mla._operands import dequantize_records

    q, caches, sink, out, lse = ref_inputs
    err_out = err_lse = dot = norm = 0.0
    for r in range(0, q.shape[0], 32):
        rows = slice(r, r + 32)
        kv = torch.cat([dequantize_records(c.view(-1, f.bytes_per_token)[i[rows].reshape(-1).long()], f)
                        .view(-1, i.shape[1], 512) for c, f, i in caches], 1).float()
        valid = torch.cat([i[rows] for _, _, i in caches], 1)[:, None, :] >= 0
        s = (torch.einsum("qhd,qkd->qhk", q[rows].float(), kv) * 512 ** -0.5).masked_fill(~valid, float("-inf"))
        ref_lse = torch.logsumexp(s, -1)
        ref = torch.einsum("qhk,qkd->qhd", torch.exp(s - torch.logaddexp(ref_lse, sink)[..., None]), kv)
        got = out[rows].float()
        err_out = max(err_out, (got - ref).abs().max().item())
        err_lse = max(err_lse, (lse[rows] - ref_lse).abs().max().item())
        dot, norm = dot + (got * ref).sum().item(), norm + (got * got + ref * ref).sum().item()
    print(f"all {q.shape[0]} query rows: max |out - ref| {err_out:.2e}, cos diff {1 - 2 * dot / norm:.2e}, "
          f"max |lse - ref| {err_lse:.2e}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tilelang-root", required=True, help="a tile-ai/tilelang checkout with examples/ascend/flashmla")
    parser.add_argument("--nq", type=int, default=4096)
    parser.add_argument("--nk", type=int, default=8192)
    parser.add_argument("--topk", type=int, default=640)
    parser.add_argument("--decode", action="store_true", help="the decode kernel (FP8 main + FP8/FP4 extra cache)")
    parser.add_argument("--batch", type=int, default=64, help="decode: requests")
    parser.add_argument("--sq", type=int, default=4, help="decode: query rows per request")
    parser.add_argument("--seq", type=int, default=256, help="decode: main-cache tokens per request")
    parser.add_argument("--extra-seq", type=int, default=2048, help="decode: extra-cache tokens per request")
    parser.add_argument("--varlen", action="store_true", help="decode: per-request lengths max(N(seq, seq / 2), sq), "
                        "as RESULTS.md's decode cases (FlashMLA's is_varlen)")
    parser.add_argument("--extra", choices=("fp8", "fp4"), default="fp8", help="decode: extra-cache format")
    parser.add_argument("--no-check", action="store_true", help="skip the comparison with the torch reference")
    args = parser.parse_args()
    if os.environ.get("DJ_TWIN_ALLOW_UNPAIRED_FLAGS") != "1":
        parser.error("set DJ_TWIN_ALLOW_UNPAIRED_FLAGS=1 (the port leaves pre-armed flags set)")
    if args.decode:  # whole pages (main 256 tokens, extra 64), every top-k index a token of its request
        if args.batch < 1 or args.sq < 1:
            parser.error(f"--batch and --sq must be positive, got {args.batch} and {args.sq}")
        if args.seq < 256 or args.seq % 256 or args.extra_seq < 512 or args.extra_seq % 64:
            parser.error(f"--seq must be a positive multiple of 256 and --extra-seq a multiple of 64 of at least 512, "
                         f"got {args.seq} and {args.extra_seq}")
    sys.path.insert(0, os.path.abspath(args.tilelang_root))

    import tilelang
    import torch
    import tvm
    from examples.ascend.flashmla.core import PASS_CONFIG

    from deepjit.backends.ascend_twin import timeline
    from deepjit.tilelang_route.ascend_check import l2_modelled
    from deepjit.tilelang_route.twin import run_on_twin

    # the port's own pass configuration (no AutoSchedule), which tilelang.compile would get
    lower = tilelang.lower

    def lower_with_config(*a, **k):
        with tvm.transform.PassContext(config={getattr(key, "value", key): v for key, v in PASS_CONFIG.items()}):
            return lower(*a, **k)

    tilelang.lower = lower_with_config

    if args.decode:
        nq = args.batch * args.sq
        func, kernel_args, ref_inputs = decode_case(args.batch, args.sq, args.seq, args.extra_seq, args.extra, args.varlen)
        flops = 4 * nq * 64 * (128 + 512) * 512
    else:
        from examples.ascend.flashmla.manual import prefill

        nq, nk, topk = args.nq, args.nk, args.topk
        g = torch.Generator().manual_seed(0)
        q = (torch.randn(nq, 64, 512, generator=g) / 10).bfloat16()
        kv = (torch.randn(nk, 512, generator=g) / 10).bfloat16()
        idx = torch.stack([torch.randperm(nk, generator=g)[:topk] for _ in range(nq)]).int()
        sink = torch.randn(64, generator=g)
        lengths = torch.full((nq,), topk, dtype=torch.int32)
        out, mx, lse = torch.zeros(nq, 64, 512).bfloat16(), torch.zeros(nq, 64), torch.zeros(nq, 64)
        func, kernel_args = prefill(nq, nk, topk), (q, kv, idx, sink, lengths, out, mx, lse)
        flops = 4 * nq * 64 * topk * 512
    start = time.perf_counter()
    with l2_modelled(), timeline.recording():
        result = run_on_twin(func, *kernel_args)
    est = result.estimate()
    print(f"twin run {time.perf_counter() - start:.0f} s")
    print(est.summary())
    print("waiting: " + ", ".join(f"{p} {w * 100:.0f}%" for p, w in est.waiting.items() if w))
    print(f"{est.seconds * 1e6:.1f} us, {flops / est.seconds / 1e12:.1f} TFLOP/s (estimate); global-memory bytes "
          f"{est.gm_bytes / 1e6:.1f} MB, of them from HBM {est.hbm_bytes / 1e6:.1f} MB (L2 model)")
    if args.no_check:
        return 0
    if args.decode:
        check_decode(ref_inputs)
        return 0
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
