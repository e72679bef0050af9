"""tile_kernels.ascend.moe_topk_gate on the Ascend twin against the reference V4.1 router: ids, unmapped ids
and the forced-random draws exact; weights and scores to upstream's allclose (the kernel's FP32
sqrt(softplus) against the reference's FP64-rounded one). Token rows past a core's tile, expert counts off
the 8-lane block, every option, strided outputs, empty input, NaN/Inf biases and non-finite unrouted rows."""
import pytest
import torch

import tile_kernels
from tile_kernels import _dispatch
from tile_kernels.ascend import moe_topk_gate as gate
from tile_kernels.reference import moe_topk_gate as ref

ALL_OPTIONS = (36, 4, 1)      # experts, top-k, shared: one lowering with every option
PLAIN = (256, 8, 0)           # DeepSeek's 256 experts top-8, no option (the ascend-check lowering)


def _inputs(tokens, experts, k, shared, seed, options=True):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=g) * 4
    if not options:
        return logits, {}
    extra = 3
    kw = dict(mask=torch.rand(tokens, generator=g) > 0.2, bias=torch.randn(experts, generator=g) * 0.1,
              image_bias=torch.randn(experts, generator=g) * 0.1,
              image_token_mask=torch.rand(tokens, generator=g) < 0.5,
              fix_routing_mask=torch.rand(tokens, generator=g) < 0.3,
              force_random=torch.rand(tokens, generator=g) < 0.25,
              to_physical_map=torch.randperm((experts + shared) * extra, generator=g).to(torch.int32).view(-1, extra),
              logical_count=torch.randint(1, extra + 1, (experts + shared,), dtype=torch.int32, generator=g))
    kw["unmapped_topk_idx"] = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(tokens)]) \
        if tokens else torch.empty(0, k, dtype=torch.int64)
    return logits, kw


ARGS = ("mask", "bias", "image_bias", "image_token_mask", "fix_routing_mask", "to_physical_map", "logical_count",
        "unmapped_topk_idx", "force_random")


def _run(fn, logits, k, shared, scale, ep_rank, kw, out_strided=False):
    """(ids, weights, unmapped, scores) written by ``fn`` (the kernel's entry point or the reference)."""
    t, e = logits.shape
    width = k + shared
    if out_strided:
        idx = torch.full((t, width + 2), 5, dtype=torch.int64)[:, 1:-1]
        w = torch.full((t, width + 2), 5.0)[:, 1:-1]
    else:
        idx, w = torch.full((t, width), 5, dtype=torch.int64), torch.full((t, width), 5.0)
    scores = torch.full((t, e), 7.0)
    un = kw.get("unmapped_topk_idx")
    if un is not None:  # a column slice of a wider buffer, as upstream allows
        un = torch.cat([un, torch.full((t, 2), 9, dtype=torch.int64)], 1)[:, :k]
    a = {n: kw.get(n) for n in ARGS} | {"unmapped_topk_idx": un}
    fn(logits, k, shared, scale, ep_rank, a["mask"], a["bias"], a["image_bias"], a["image_token_mask"],
       a["fix_routing_mask"], a["to_physical_map"], a["logical_count"], a["unmapped_topk_idx"], a["force_random"],
       idx, w, scores)
    return idx, w, un, scores


def _check(got, want):
    ids, w, un, sc = got
    ids_r, w_r, un_r, sc_r = want
    assert torch.equal(ids, ids_r)
    assert torch.allclose(w, w_r, equal_nan=True)
    if un_r is not None:
        assert torch.equal(un, un_r)
    assert torch.allclose(sc, sc_r, equal_nan=True)


@pytest.mark.parametrize("tokens,out_strided", [(70, False), (37, False), (37, True)])  # 70: past the 64-row tile
def test_every_option_matches_reference(tokens, out_strided):
    experts, k, shared = ALL_OPTIONS
    logits, kw = _inputs(tokens, experts, k, shared, tokens)
    got = _run(gate.moe_topk_gate_forward, logits, k, shared, 1 / 3, 5, kw, out_strided)
    want = _run(ref.moe_topk_gate_forward, logits, k, shared, 1 / 3, 5, kw, out_strided)
    _check(got, want)
    forced = kw["force_random"] & kw["mask"]
    assert forced.any() and (got[0][forced] >= 0).all()          # the random draws were compared exactly
    assert (got[3][~kw["mask"] | forced] == 0).all()


@pytest.mark.parametrize("tokens", [70, 33])
def test_plain_router_at_256_experts(tokens):
    experts, k, shared = PLAIN
    logits, kw = _inputs(tokens, experts, k, shared, 7, options=False)
    logits[0, :12] = 0.5  # a tie: the smaller expert id first
    _check(_run(gate.moe_topk_gate_forward, logits, k, shared, 2.5, 0, kw),
            _run(ref.moe_topk_gate_forward, logits, k, shared, 2.5, 0, kw))


def test_no_tokens_launch_nothing():
    experts, k, shared = ALL_OPTIONS
    logits, kw = _inputs(0, experts, k, shared, 1)
    got = _run(gate.moe_topk_gate_forward, logits, k, shared, 1.0, 0, kw)
    assert got[0].shape == (0, k + shared) and got[3].shape == (0, experts)


def test_nan_and_inf():
    """NaN biases rank first (torch's sort), then +Inf; unrouted rows may hold any logits; finite extremes."""
    experts, k, shared = ALL_OPTIONS
    logits, kw = _inputs(12, experts, k, shared, 3)
    kw["bias"] = kw["bias"].index_fill(0, torch.tensor([4, 9]), float("nan")).index_fill(
        0, torch.tensor([1]), float("inf")).index_fill(0, torch.tensor([2]), -float("inf"))
    kw["image_token_mask"][:] = False
    kw["fix_routing_mask"][:] = False
    kw["mask"][:2] = False
    kw["mask"][2:5] = True
    kw["force_random"][:4] = False
    kw["force_random"][2] = True
    logits[0, 3], logits[1, :] = float("nan"), float("inf")      # unrouted rows
    logits[2, 5] = -float("inf")                                 # a forced row
    logits[3, 6], logits[4, 7] = 1e30, -1e30                     # sqrt(x) and 0
    got = _run(gate.moe_topk_gate_forward, logits, k, shared, 1.0, 0, kw)
    want = _run(ref.moe_topk_gate_forward, logits, k, shared, 1.0, 0, kw)
    _check(got, want)
    assert got[2][3, :3].tolist() == [4, 9, 1]                   # NaN, NaN, +Inf first


def test_public_op_runs_the_ascend_kernel(monkeypatch):
    monkeypatch.setenv("TK_BACKEND", "ascend")
    experts, k, shared = ALL_OPTIONS
    logits, kw = _inputs(37, experts, k, shared, 11)
    kw_ref = {n: (v.clone() if n == "unmapped_topk_idx" else v) for n, v in kw.items()}
    scores, scores_ref = torch.empty(37, experts), torch.empty(37, experts)
    args = (logits, k, shared, 0.5, 2, *[kw.get(n) for n in ARGS[:7]], kw["unmapped_topk_idx"], kw["force_random"],
            torch.empty(37, k + shared, dtype=torch.int64), torch.empty(37, k + shared), scores)
    assert _dispatch.TABLE.serves("moe_topk_gate_forward", logits.device, *args) == "ascend"
    ids, w = tile_kernels.moe.moe_topk_gate_forward(logits, k, True, shared, 0.5, 2, scores=scores, **kw)
    idx_r, w_r = torch.empty(37, k + shared, dtype=torch.int64), torch.empty(37, k + shared)
    ref.moe_topk_gate_forward(logits, k, shared, 0.5, 2, *[kw_ref.get(n) for n in ARGS[:7]],
                              kw_ref["unmapped_topk_idx"], kw_ref["force_random"], idx_r, w_r, scores_ref)
    _check((ids, w, kw["unmapped_topk_idx"], scores), (idx_r, w_r, kw_ref["unmapped_topk_idx"], scores_ref))


def test_forms_left_to_the_reference(monkeypatch):
    """More experts than a UB row holds, or a to_physical_map past its UB tile: the reference serves them."""
    monkeypatch.setenv("TK_BACKEND", "ascend")

    def served(experts, map_cols):
        logits = torch.empty(1, experts)
        phys = None if map_cols is None else torch.zeros(experts, map_cols, dtype=torch.int32)
        count = None if map_cols is None else torch.ones(experts, dtype=torch.int32)
        return _dispatch.TABLE.serves("moe_topk_gate_forward", logits.device, logits, 2, 0, 1.0, 0, None, None, None,
                                 None, None, phys, count, None, None, torch.empty(1, 2, dtype=torch.int64),
                                 torch.empty(1, 2), None)

    assert served(gate.MAX_EXPERTS, None) == "ascend" and served(gate.MAX_EXPERTS + 1, None) == "reference"
    assert served(256, 32) == "ascend" and served(256, 33) == "reference"  # 33 columns pad to 40 in UB
    assert served(1024, 8) == "ascend" and served(1024, 3) == "ascend" and served(1025, 3) == "reference"


def test_out_of_range_values_are_clamped_in_the_kernel():
    """The public op checks fixed ids and replica counts on CPU tensors only (no host read of device tensors);
    the kernel clamps them (ids into [0, E), counts into [1, map columns]), so it never reads past a tile:
    the result is the reference's on the clamped values."""
    experts, k, shared = ALL_OPTIONS
    logits, kw = _inputs(37, experts, k, shared, 5)
    kw["fix_routing_mask"][:] = True
    kw["unmapped_topk_idx"][0, 0], kw["unmapped_topk_idx"][1, 1] = 1 << 40, -5
    kw["logical_count"][0], kw["logical_count"][3] = 0, 99
    clamped = dict(kw, unmapped_topk_idx=kw["unmapped_topk_idx"].clamp(0, experts - 1),
                   logical_count=kw["logical_count"].clamp(1, kw["to_physical_map"].shape[1]))
    _check(_run(gate.moe_topk_gate_forward, logits, k, shared, 1.0, 0, kw),
           _run(ref.moe_topk_gate_forward, logits, k, shared, 1.0, 0, clamped))
