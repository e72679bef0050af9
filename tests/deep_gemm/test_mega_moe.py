"""Mega MoE across real local ranks, bitwise against the unfused pipeline built from this library's pieces.

The baseline moves data with torch.distributed collectives (gloo), groups each rank's received
(token, slot) pairs per local expert in the psum layout, and runs the public grouped GEMMs, the
SwiGLU step and the top-k combine; the fused op moves data through the shared-memory window."""
import os

import pytest
import torch

import deep_gemm
from deep_gemm.mega import (
    _deinterleave,
    _from_ascend_layout,
    _interleave,
    _to_ascend_layout,
    _utccp,
    combine_topk,
    swiglu_apply_weight_to_fp8,
)
from deep_gemm.utils import align, per_token_cast_to_fp4, per_token_cast_to_fp8
from tests.testkit import run_ranks

HIDDEN, INTER, EXPERTS, TOPK = 256, 128, 8, 3      # V4-Flash (4096, 2048, 256, 6) scaled to two cores


def _fp4_weights(w: torch.Tensor):
    g, n, k = w.shape
    parts = [per_token_cast_to_fp4(w[i], use_ue8m0=True, gran_k=32) for i in range(g)]
    q = torch.stack([p[0] for p in parts])
    sf = deep_gemm.transform_sf_into_required_layout(torch.stack([p[1] for p in parts]), n, k, (1, 32), g)
    return q, sf


def _inputs(rank, num_ranks, num_tokens, bf16, masked):
    gen = torch.Generator().manual_seed(1234)                       # same weights on every rank
    e_local = EXPERTS // num_ranks
    l1 = (torch.randn(EXPERTS, 2 * INTER, HIDDEN, generator=gen) * 0.1).bfloat16()
    l2 = (torch.randn(EXPERTS, HIDDEN, INTER, generator=gen) * 0.1).bfloat16()
    l1, l2 = l1[rank * e_local:(rank + 1) * e_local], l2[rank * e_local:(rank + 1) * e_local]
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(num_tokens, HIDDEN, generator=gen).bfloat16()
    scores = torch.randn(num_tokens, EXPERTS, generator=gen)
    topk_weights, topk_idx = torch.topk(scores.softmax(-1), TOPK, dim=-1)
    if masked:
        drop = torch.rand(num_tokens, TOPK, generator=gen) < 0.2
        topk_idx = topk_idx.masked_fill(drop, -1)
        topk_weights = topk_weights.masked_fill(drop, 0)
    if bf16:
        return (x, None), l1, l2, topk_idx, topk_weights
    return per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True), _fp4_weights(l1), \
        _fp4_weights(l2), topk_idx, topk_weights


def fill(buf, num_tokens, x, x_sf, topk_idx, topk_weights, bf16):
    """A call's inputs into the buffer's first ``num_tokens`` rows, as upstream's callers copy them."""
    buf.x[:num_tokens].copy_(x)
    if not bf16:
        buf.x_sf[:num_tokens].copy_(x_sf)
    buf.topk_idx[:num_tokens].copy_(topk_idx)
    buf.topk_weights[:num_tokens].copy_(topk_weights)


def _baseline(rank, num_ranks, x, x_sf, l1, l2, topk_idx, topk_weights, clamp, bf16):
    import torch.distributed as dist
    t_max, e_local = 512, EXPERTS // num_ranks
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(num_ranks)]
    dist.all_gather(counts, torch.tensor([x.size(0)]))

    def gather(t):
        padded = torch.zeros(t_max, *t.shape[1:], dtype=t.dtype)
        padded[:t.size(0)] = t
        raw = padded.view(torch.uint8) if padded.dtype in (torch.float8_e4m3fn, torch.bfloat16) else padded
        out = [torch.empty_like(raw) for _ in range(num_ranks)]
        dist.all_gather(out, raw)
        return [o.view(t.dtype)[:int(c)] for o, c in zip(out, counts, strict=True)]

    xs, idxs, ws = gather(x), gather(topk_idx), gather(topk_weights)
    sfs = gather(x_sf) if not bf16 else None
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    rows, ends, per_expert, end = [], [], [], 0
    for e in range(e_local):
        start = align(end, alignment) if e else 0
        mine = [(p, t, k) for p in range(num_ranks) for t, k in (idxs[p] == rank * e_local + e).nonzero().tolist()]
        rows += [(start + i, p, t, k) for i, (p, t, k) in enumerate(mine)]
        end = start + len(mine)
        ends.append(end)
        per_expert.append(len(mine))
    m = align(end, alignment)
    a = torch.zeros(m, HIDDEN, dtype=x.dtype)
    a_sf = torch.zeros(m, HIDDEN // 128, dtype=torch.int32)
    w = torch.zeros(m)
    for r, p, t, k in rows:
        a[r], w[r] = xs[p][t], ws[p][t, k]
        if not bf16:
            a_sf[r] = sfs[p][t]
    psum = torch.tensor(ends, dtype=torch.int32)
    l1_out = torch.empty(m, 2 * INTER, dtype=torch.bfloat16)
    l2_out = torch.empty(m, HIDDEN, dtype=torch.bfloat16)
    if bf16:
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, l1, l1_out, psum, use_psum_layout=True)
        act = swiglu_apply_weight_to_fp8(l1_out, w, clamp, to_fp8=False)
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(act, l2, l2_out, psum, use_psum_layout=True)
    else:
        deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, a_sf), l1, l1_out, psum, recipe=(1, 1, 32),
                                                       use_psum_layout=True)
        act = swiglu_apply_weight_to_fp8(l1_out, w, clamp)
        deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous(act, l2, l2_out, psum, recipe=(1, 1, 32), use_psum_layout=True)
    # combine: every rank's results for every source, gathered, then summed per own token
    results = torch.zeros(num_ranks, t_max, TOPK, HIDDEN, dtype=torch.bfloat16)
    for r, p, t, k in rows:
        results[p, t, k] = l2_out[r]
    gathered = [torch.empty_like(results.view(torch.uint8)) for _ in range(num_ranks)]
    dist.all_gather(gathered, results.view(torch.uint8))
    mine = sum(g.view(torch.bfloat16)[rank].float() for g in gathered)       # each slot filled by one owner
    slots = mine[:x.size(0)].transpose(0, 1).bfloat16()
    return combine_topk(slots, topk_idx), torch.tensor(per_expert, dtype=torch.int32)


def _rank(rank, num_ranks, bf16, masked, clamp, ascend_layout=False):
    import torch.distributed as dist
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    num_tokens = 40 + 7 * rank
    (x, x_sf), l1, l2, topk_idx, topk_weights = _inputs(rank, num_ranks, num_tokens, bf16, masked)
    buf = deep_gemm.get_symm_buffer_for_mega_moe(dist.group.WORLD, EXPERTS, 100, TOPK, HIDDEN, INTER,
                                                 mma_type="bf16xbf16" if bf16 else "fp8xfp4")
    assert buf.num_max_tokens_per_rank == 384 and buf.x.shape == (384, HIDDEN)
    l1t, l2t = deep_gemm.transform_weights_for_mega_moe(l1, l2)
    if ascend_layout:   # DeepGEMM-Ascend's layout (what the transform gives on the Ascend path) on the host path
        l1t, l2t = _to_ascend_layout(*l1, True), _to_ascend_layout(*l2, False)
    stats = torch.full((EXPERTS // num_ranks,), 5, dtype=torch.int32)
    y = torch.empty(num_tokens, HIDDEN, dtype=torch.bfloat16)
    for _ in range(2):                  # the second call reuses the buffer (stale slots must not leak)
        fill(buf, num_tokens, x, x_sf, topk_idx, topk_weights, bf16)
        if bf16:
            deep_gemm.bf16_mega_moe(y, l1t, l2t, buf, stats, activation_clamp=clamp)
        else:
            deep_gemm.fp8_fp4_mega_moe(y, l1t, l2t, buf, stats, activation_clamp=clamp)
    ref, ref_stats = _baseline(rank, num_ranks, x, x_sf, l1, l2, topk_idx, topk_weights, clamp, bf16)
    if os.environ.get("DG_COMM_KERNEL_DEBUG") == "1":   # upstream's debug switch: the buffer zeroed after a call
        assert not bool(buf.buffer.any()), f"rank {rank}: buffer not zeroed"
    buf.destroy()
    assert torch.equal(y, ref), f"rank {rank}: fused != unfused ({(y.float() - ref.float()).abs().max()})"
    assert torch.equal(stats, 5 + 2 * ref_stats), f"rank {rank}: stats {stats.tolist()} vs {ref_stats.tolist()}"
    assert y.abs().sum() > 0
    return True


@pytest.mark.parametrize("num_ranks,bf16,masked,clamp,ascend_layout", [(2, False, False, None, False),
                                                                        (4, False, True, 10.0, False),
                                                                        (2, True, True, None, False),
                                                                        (2, False, True, None, True)])
def test_mega_moe_matches_unfused(num_ranks, bf16, masked, clamp, ascend_layout):
    debug = {"DG_COMM_KERNEL_DEBUG": "1"} if ascend_layout else {}   # one case zeroes the buffer after each call
    assert all(run_ranks(_rank, num_ranks, bf16, masked, clamp, ascend_layout, timeout=240, env=debug))


def test_ascend_weight_layout():
    """DeepGEMM-Ascend's FP8 x FP4 Mega MoE layout: 256-row blocks, L1 gate / up in 128-row halves, int16 scale
    pairs [E, N / 256, K / 64, 256] with +6 on every exponent byte but 255; the op's inverse restores both."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randint(-128, 128, (2, 512, 64), dtype=torch.int8, generator=gen)      # K = 128
    exps = torch.randint(100, 141, (2, 512, 4), dtype=torch.uint8, generator=gen)   # 4 K-blocks of 32
    exps[1, 300, 2] = 255
    sf = exps.view(torch.int32)                                                      # [2, 512, 1] packed
    w4, sf4 = _to_ascend_layout(w, sf, True)
    assert w4.shape == (2, 2, 256, 64) and sf4.shape == (2, 2, 2, 256) and sf4.dtype == torch.int16
    assert torch.equal(w4[0, 0, :128], w[0, :128]) and torch.equal(w4[0, 0, 128:], w[0, 256:384])
    assert torch.equal(w4[1, 1, :128], w[1, 128:256]) and torch.equal(w4[1, 1, 128:], w[1, 384:])
    pairs = sf4.view(torch.uint8).view(2, 2, 2, 256, 2)                             # [E, block, K pair, row, byte]
    assert torch.equal(pairs[0, 1, 1, 130], exps[0, 384 + 2, 2:4] + 6)               # block 1 row 130: up row 258
    assert int(pairs[1, 0, 1, 128 + 44, 0]) == 255                                  # up row 44 (row 300), NaN kept
    back, sf_back = _from_ascend_layout(w4, sf4)
    assert torch.equal(_deinterleave(back, 128), w)
    assert torch.equal(_deinterleave(sf_back, 128).view(torch.uint8), exps)          # 255 kept, the rest unbiased
    l2w4, l2sf4 = _to_ascend_layout(w, sf, False)                                    # L2: blocks only
    assert torch.equal(l2w4.reshape(2, 512, 64), w)
    exps[0, 7, 1] = 249
    with pytest.raises(ValueError, match="exponent bytes <= 248 or 255"):
        _to_ascend_layout(w, exps.view(torch.int32), True)


@pytest.mark.parametrize("backend", ["host", "reference"])
def test_weight_transform_round_trip(monkeypatch, backend):
    monkeypatch.setenv("DG_BACKEND", backend)
    w = torch.randn(2, 256, 64)
    inter = _interleave(w)
    assert torch.equal(inter[:, 8:16], w[:, 128:136]) and torch.equal(inter[:, 16:24], w[:, 8:16])
    assert torch.equal(_deinterleave(inter), w)
    sf = torch.arange(2 * 256 * 3, dtype=torch.int32).view(2, 256, 3)
    moved = _utccp(sf)
    assert torch.equal(moved[0, 1], sf[0, 32]) and torch.equal(moved[0, 4], sf[0, 1])
    assert torch.equal(_utccp(moved, inverse=True), sf)


def _ascend_call_forms(rank, num_ranks):
    """DeepGEMM-Ascend's constructor form (no ring argument; num_shared_experts=0, base=None) and its op keywords
    (shared expert weights None) are taken; what they would add is refused naming the argument."""
    import torch.distributed as dist
    out = []
    buf = deep_gemm.SymmBuffer(dist.group.WORLD, EXPERTS, 16, TOPK, HIDDEN, INTER, num_shared_experts=0,
                               mma_type="fp8xfp4", activation="swiglu", base=None)
    low, high = deep_gemm.mega.get_ring_limit_for_mega_moe(16, EXPERTS // num_ranks, TOPK, num_ranks)
    out.append(0 < low <= buf.num_ring_tokens <= high)   # within upstream's ring limits for the count as given
    (x, x_sf), l1, l2, topk_idx, topk_weights = _inputs(rank, num_ranks, 8, False, False)
    l1t, l2t = deep_gemm.transform_weights_for_mega_moe(l1, l2)
    fill(buf, 8, x, x_sf, topk_idx, topk_weights, False)
    y = torch.empty(8, HIDDEN, dtype=torch.bfloat16)
    deep_gemm.fp8_fp4_mega_moe(y, l1t, l2t, buf, None, (1, 1, 32), "swiglu", None, True, shared_l1_weights=None,
                               shared_l2_weights=None)
    out.append(bool(y.abs().sum() > 0))
    for call, fragment in (
            (lambda: deep_gemm.fp8_fp4_mega_moe(y, l1t, l2t, buf, shared_l1_weights=l1t), "shared_l1_weights: expected None"),
            (lambda: deep_gemm.SymmBuffer(dist.group.WORLD, EXPERTS, 16, TOPK, HIDDEN, INTER, num_shared_experts=1),
             "num_shared_experts: expected 0"),
            (lambda: deep_gemm.SymmBuffer(dist.group.WORLD, EXPERTS, 16, TOPK, HIDDEN, INTER, base=buf.buffer),
             "base: expected None")):
        try:
            call()
            out.append("no error")
        except ValueError as exc:
            out.append(fragment in str(exc) or str(exc))
    buf.destroy()
    return out


def test_deepgemm_ascend_call_forms():
    assert run_ranks(_ascend_call_forms, 1, timeout=120) == [[True] * 5]
