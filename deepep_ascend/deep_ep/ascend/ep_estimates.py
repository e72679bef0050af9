"""Twin timeline estimates of deep_ep's Ascend dispatch and combine over the symmetric window
(``EP_BACKEND=ascend EP_ASCEND_TRANSPORT=symm``) at DeepSeek's shapes, each rank a real process.

``estimate(mode, ranks, tokens, ...)`` spawns ``ranks`` processes (gloo for the rendezvous, the twin's
shared-memory windows for the data, as tests/deep_ep/ascend/test_symm_transport.py and test_ll_symm.py
run them); every rank dispatches its tokens and combines them back once, and records the twin timeline
of each of its kernel launches (ascend_check.run_published, the L2 model on). A rank's time is the sum of
its launches' estimates; the figure is the slowest rank's. Bandwidth is DeepEP's "algorithm bandwidth"
as its legacy benchmarks compute it (deepseek-ai/DeepEP tests/legacy/test_intranode.py: received
token-major rows x hidden x 2 bytes, times (1 + 4/128) / 2 for an FP8 dispatch; combine the same BF16
bytes; tests/legacy/test_low_latency.py: per valid top-k selection of the rank's tokens,
hidden + hidden/128 x 4 + 16 bytes for the FP8 dispatch and hidden x 2 for the BF16 combine).

What the estimate charges: a kernel's stores into a peer's window and its loads from its own inbox are
ordinary GM moves of the twin (MTE3 / MTE2), charged on the timeline like any GM byte (the chip's L2
bandwidth, the HBM share the L2 model says misses, the AI core's port); no chip-to-chip link (the 950's
UB link) is modelled, and a kernel's wait for a peer's flag costs nothing (the timeline has no cross-rank
events: each rank's kernels are scheduled alone). So these are on-chip lower bounds for the window
traffic, estimates, never measurements.

Routing: top-k of ``experts`` distinct experts per token from uniform random scores (DeepEP's legacy
tests draw them so), experts split evenly across the ranks, every slot valid.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

RANKS, HIDDEN, TOPK, EXPERTS, TOKENS, LL_TOKENS = 8, 7168, 8, 256, 4096, 128
ENV = {"EP_BACKEND": "ascend", "EP_ASCEND_TRANSPORT": "symm", "EP_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Published:
    """A published figure to set an estimate beside: ``us`` / ``gbps`` (None where not given) and where
    it comes from."""
    us: float | None
    gbps: float
    source: str


# deepseek-ai/DeepEP docs/legacy.md "Performance" (V1 kernels, H800; normal: 4096 tokens, 7168 hidden,
# top-8, FP8 dispatch, BF16 combine; low latency: 128 tokens). sgl-project/sgl-kernel-npu README.md
# "DeepEP-Ascend Performance" (A3 384 SuperPOD over HCCS, same shapes, INT8 dispatch, BF16 combine).
_DEEPEP = "deepseek-ai/DeepEP docs/legacy.md"
_ASCEND = "sgl-project/sgl-kernel-npu README.md (DeepEP-Ascend, A3 SuperPOD, HCCS)"
PUBLISHED = {
    ("normal", "dispatch"): (Published(None, 153, f"{_DEEPEP}, normal kernels, Intranode EP8 dispatch (H800 NVLink)"),
                             Published(None, 146, f"{_ASCEND}, normal kernels, Intranode EP8 dispatch")),
    ("normal", "combine"): (Published(None, 158, f"{_DEEPEP}, normal kernels, Intranode EP8 combine (H800 NVLink)"),
                            Published(None, 125, f"{_ASCEND}, normal kernels, Intranode EP8 combine")),
    ("low_latency", "dispatch"): (Published(77, 98, f"{_DEEPEP}, low-latency kernels, EP8 dispatch (H800 RDMA)"),
                                  Published(132, 58, f"{_ASCEND}, low-latency kernels, EP8 dispatch")),
    ("low_latency", "combine"): (Published(114, 127, f"{_DEEPEP}, low-latency kernels, EP8 combine (H800 RDMA)"),
                                 Published(126, 116, f"{_ASCEND}, low-latency kernels, EP8 combine")),
}


def routing(tokens: int, experts: int, topk: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    weights, idx = torch.topk(torch.rand(tokens, experts, generator=g), topk, dim=1)
    return idx.long(), weights.float()


def algorithm_bytes(mode: str, idx: torch.Tensor, hidden: int, fp8: bool, recv_rows: int) -> dict:
    """DeepEP's bytes of one rank's dispatch and combine (module docstring)."""
    if mode == "low_latency":
        sel = int((idx >= 0).sum())
        return {"dispatch": sel * ((hidden + hidden // 128 * 4 + 16) if fp8 else hidden * 2),
                "combine": sel * hidden * 2}
    bf16 = recv_rows * hidden * 2
    return {"dispatch": bf16 * ((1 + 4 / 128) / 2 if fp8 else 1), "combine": bf16}


def _measure(rank, world, mode, tokens, hidden, topk, experts, fp8, timeout_s) -> dict:
    import torch.distributed as dist

    import deep_ep
    from deep_ep.utils.math import per_token_cast_to_fp8
    from deepjit.tilelang_route.ascend_check import PublishedShape, run_published

    idx, w = routing(tokens, experts, topk, seed=1000 + rank)
    x = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(rank)).bfloat16()
    xin = per_token_cast_to_fp8(x, use_ue8m0=False) if fp8 and mode == "normal" else x
    out: dict = {}
    if mode == "normal":
        buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=tokens, hidden=hidden, num_topk=topk,
                               use_fp8_dispatch=fp8, explicitly_destroy=True, num_cpu_timeout_secs=timeout_s)

        def dispatch():
            out["d"] = buf.dispatch(xin, idx, w, num_experts=experts, do_cpu_sync=True)

        def combine():
            recv_x, _, recv_w, handle, _ = out["d"]
            y = recv_x if not fp8 else torch.zeros(recv_x[0].shape, dtype=torch.bfloat16)
            buf.combine(y, handle, recv_w)
    else:
        hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(tokens, hidden, world, experts)
        buf = deep_ep.Buffer(dist.group.WORLD, 0, hint, low_latency_mode=True, explicitly_destroy=True)

        def dispatch():
            out["d"] = buf.low_latency_dispatch(x, idx, tokens, experts, use_fp8=fp8)

        def combine():
            recv, _, handle, _, _ = out["d"]
            shape = (recv[0] if fp8 else recv).shape
            buf.low_latency_combine(torch.zeros(shape, dtype=torch.bfloat16), idx, w, handle)
    try:
        phases = {name: run_published(PublishedShape(name, "vector", fn))
                  for name, fn in (("dispatch", dispatch), ("combine", combine))}
        recv_rows = (out["d"][0][0] if fp8 else out["d"][0]).shape[0] if mode == "normal" else 0
    finally:
        buf.destroy()
    nbytes = algorithm_bytes(mode, idx, hidden, fp8, recv_rows)
    return {name: {**p, "bytes": nbytes[name]} for name, p in phases.items()}


def run_ranks(mode: str, ranks: int, tokens: int, hidden: int = HIDDEN, topk: int = TOPK, experts: int = EXPERTS,
              fp8: bool = False, timeout_s: int = 1800) -> list[dict]:
    """Each rank's ``{"dispatch": outcome, "combine": outcome}`` (run_published's, plus ``bytes``)."""
    from deepjit import ranks as rank_processes
    # a rank's own waits time out before the parent gives up on it, so their error is what gets reported
    rank_timeout_s = max(timeout_s - 30, timeout_s // 2)
    return rank_processes.run(_measure, ranks, mode, tokens, hidden, topk, experts, fp8, rank_timeout_s,
                              timeout_s=timeout_s, env=ENV)


def estimate(mode: str, ranks: int, tokens: int, fp8: bool = False, **shape) -> dict:
    """``{"dispatch": outcome, "combine": outcome}`` of the slowest rank (by timeline estimate), each with
    ``us``, ``gbps`` (that rank's algorithm bytes over its time) and ``ranks_us`` (every rank's time)."""
    per_rank = run_ranks(mode, ranks, tokens, fp8=fp8, **shape)
    out = {}
    for phase in ("dispatch", "combine"):
        times = [r[phase]["estimate"].seconds for r in per_rank]
        slow = per_rank[max(range(ranks), key=times.__getitem__)][phase]
        us = slow["estimate"].seconds * 1e6
        out[phase] = {**slow, "us": us, "gbps": slow["bytes"] / us / 1e3, "ranks_us": [t * 1e6 for t in times]}
    return out


REMOTE_MODEL = ("remote-window stores/loads charged as local GM traffic (L2, HBM share, AI-core port); "
                "no UB link, no cross-rank wait")


@functools.cache
def _run_once(mode: str, ranks: int, tokens: int, fp8: bool, experts: int) -> tuple[dict | None, Exception | None]:
    try:
        return estimate(mode, ranks, tokens, fp8=fp8, experts=experts), None
    except Exception as exc:  # kept, so the other phase of a failed run fails at once instead of running again
        return None, exc


def _cached(mode: str, ranks: int, tokens: int, fp8: bool, experts: int) -> dict:
    outcome, error = _run_once(mode, ranks, tokens, fp8, experts)
    if error is not None:
        raise error
    return outcome


def published_shape_outcome(mode: str, phase: str, ranks: int, tokens: int, fp8: bool, experts: int = EXPERTS) -> dict:
    """One ``ascend_check`` multi-rank outcome: the slowest rank's, beside the published figures."""
    o = _cached(mode, ranks, tokens, fp8, experts)[phase]
    full = TOKENS if mode == "normal" else LL_TOKENS
    scope = (f"slowest of {ranks} ranks, {tokens} tokens/rank" + ("" if tokens == full else f" (not {full}: reduced)")
             + ("" if experts == EXPERTS else f", {experts} experts (not {EXPERTS}: reduced)"))
    pubs = PUBLISHED[(mode, phase)]
    beside = "; ".join(("" if p.us is None else f"{p.us:.0f} us, ") + f"{p.gbps:.0f} GB/s [{p.source}]" for p in pubs)
    note = (f"estimate, not a measurement: {o['us']:.1f} us, {o['gbps']:.1f} GB/s algorithm bandwidth ({scope}) | "
            f"published (measured on other hardware): {beside} | {REMOTE_MODEL}")
    extra = {"ranks": ranks, "tokens_per_rank": tokens, "full_shape_tokens": full, "experts": experts, "fp8": fp8,
             "algorithm_bytes": o["bytes"], "algorithm_gbps": o["gbps"], "ranks_us": o["ranks_us"],
             "published": [vars(p) for p in pubs], "remote_traffic": REMOTE_MODEL}
    return {"estimate": o["estimate"], "roofline": o["roofline"], "operand": o["operand"], "note": note,
            "extra": extra}
