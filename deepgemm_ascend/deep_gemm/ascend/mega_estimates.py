"""Twin timeline estimate of one ``fp8_fp4_mega_moe`` call on the Ascend path (``ascend/mega_moe.py``) at a
shape DeepSeek published Mega MoE figures for, each rank a real process (``deepjit.ranks``: gloo for the
rendezvous, the twin's shared-memory window for the data, as tests/deep_gemm/ascend/test_mega_moe.py runs it).

Every rank makes its buffer, fills its tokens, makes one warm call (the kernels compile) and records the
timeline of a second (``ascend_check.run_published``, the L2 model on). A rank's time is its call's one launch
(``mega_moe.asc``: the steps in order, every core meeting the others between them on the chip's all-core and
cube / vector flags, which the timeline orders), and the figure is the slowest rank's. As in deep_ep's window estimates, a kernel's loads from and stores into a peer's window are
charged as local GM traffic and a wait for a peer's flag costs nothing (no cross-rank events), so these are
on-chip estimates, never measurements.

Published: deepseek-ai/DeepGEMM PR #316 ("Add various optimizations and Mega MoE benchmarks"), DeepSeek-V4-Flash
(256 experts, top-6, hidden 4096, intermediate 2048) under EP8, batch 1 (tokens per rank): 56.5 us, averaged over
the 8 ranks, measured with upstream's one persistent kernel on NVIDIA hardware (upstream's FP8 x FP4 Mega MoE is
an SM100 kernel), not on a 950. Only batch 1 is run: at batch 512 every rank's 32 experts are busy and the twin
would execute about 0.15 TFLOP of cube work per rank, 1.2 TFLOP for the 8, on this host's cores.

Not counted: the launch overhead (the twin's timeline starts at a launch; a call has one). A call runs nothing
but its launch (the GEMMs read the activations' packed scale rows and the weights' scales where they lie), so no
conversion around it is left out. The GEMMs' K-major activation-scale loads (DN->NZ, a row's 4 pairs of a
K block: 8-byte runs) are charged by their bytes, as every GM -> L1 ND/DN -> NZ move is.

Inputs: FP4 weights drawn directly in DeepGEMM-Ascend's layout (random packed E2M1 bytes, per-32 UE8M0 scales
near 1: the bytes a transform of random weights would give, without transforming 3 GB); tokens routed to top-k
distinct experts from uniform random scores, every slot valid. The figure printed beside the published
mean is the slowest rank's (each rank's combine waits for every peer); the mean over ranks is printed too.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

RANKS = 8


@dataclass(frozen=True)
class Shape:
    name: str
    experts: int
    topk: int
    hidden: int
    intermediate: int
    tokens: int
    published_us: float
    source: str


_PR316 = "deepseek-ai/DeepGEMM PR #316, EP8, averaged over 8 ranks, NVIDIA (SM100), one persistent kernel"
SHAPES = (Shape("v4_flash_batch1", 256, 6, 4096, 2048, 1, 56.5, f"{_PR316}: DeepSeek-V4-Flash, batch 1"),)


def weights(experts: int, n: int, k: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random FP4 weights ``[E, N, K]`` (packed) with per-32 UE8M0 scales in DeepGEMM-Ascend's layout."""
    from .. import mega
    packed = torch.randint(-128, 128, (experts, n, k // 2), dtype=torch.int8, generator=gen)
    exps = torch.randint(125, 130, (experts, n, k // 32), dtype=torch.uint8, generator=gen)
    return mega._to_ascend_layout(packed, exps.view(torch.int16), False)


def _rank(rank: int, world: int, shape: Shape) -> dict:
    import torch.distributed as dist

    import deep_gemm
    from deep_gemm.utils.math import per_token_cast_to_fp8
    from deepjit.tilelang_route.ascend_check import PublishedShape, run_published

    os.environ["DG_BACKEND"] = "ascend"
    gen = torch.Generator().manual_seed(rank)
    local = shape.experts // world
    l1 = weights(local, 2 * shape.intermediate, shape.hidden, gen)
    l2 = weights(local, shape.hidden, shape.intermediate, gen)
    x = torch.randn(shape.tokens, shape.hidden, generator=gen).bfloat16()
    x_fp8, x_sf = per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)
    topk_w, topk_idx = torch.topk(torch.rand(shape.tokens, shape.experts, generator=gen), shape.topk, dim=1)
    buf = deep_gemm.get_symm_buffer_for_mega_moe(dist.group.WORLD, shape.experts, shape.tokens, shape.topk,
                                                 shape.hidden, shape.intermediate, mma_type="fp8xfp4")
    try:
        buf.x[:shape.tokens].copy_(x_fp8)
        buf.x_sf[:shape.tokens].copy_(x_sf)
        buf.topk_idx[:shape.tokens].copy_(topk_idx)
        buf.topk_weights[:shape.tokens].copy_(topk_w)
        y = torch.empty(shape.tokens, shape.hidden, dtype=torch.bfloat16)

        def call():
            deep_gemm.fp8_fp4_mega_moe(y, l1, l2, buf)

        call()   # compiles every kernel
        outcome = run_published(PublishedShape(shape.name, "mix", call))
    finally:
        buf.destroy()
    return {k: outcome[k] for k in ("estimate", "roofline", "operand")}


@functools.cache
def estimate(shape: Shape, ranks: int = RANKS, timeout_s: int = 1800) -> dict:
    """The slowest rank's outcome (``run_published``'s) plus ``ranks_us``, every rank's estimate."""
    from deepjit import ranks as rank_processes
    per_rank = rank_processes.run(_rank, ranks, shape, timeout_s=timeout_s)
    times = [r["estimate"].seconds * 1e6 for r in per_rank]
    return {**per_rank[max(range(ranks), key=times.__getitem__)], "ranks_us": times}


def published_shape_outcome(shape: Shape, ranks: int = RANKS) -> dict:
    """One ``ascend_check`` multi-rank outcome, with the published figure beside it."""
    o = estimate(shape, ranks)
    us, mean = o["estimate"].seconds * 1e6, sum(o["ranks_us"]) / ranks
    note = (f"estimate, not a measurement: {us:.1f} us, slowest of {ranks} ranks (mean {mean:.1f} us; "
            f"{shape.tokens} tokens/rank, {shape.experts} experts, top-{shape.topk}, hidden {shape.hidden}, "
            f"intermediate {shape.intermediate}) | published (measured on other hardware): {shape.published_us} us "
            f"[{shape.source}] | remote-window traffic charged as local GM, no cross-rank wait; one persistent "
            f"kernel whose steps do not overlap")
    extra = {"ranks": ranks, "tokens_per_rank": shape.tokens, "experts": shape.experts, "topk": shape.topk,
             "ranks_us": o["ranks_us"], "mean_us": mean, "published_us": shape.published_us,
             "published_source": shape.source}
    return {"estimate": o["estimate"], "roofline": o["roofline"], "operand": o["operand"], "note": note,
            "extra": extra}
