"""The V4.1 router ``moe_topk_gate_forward``: the reference by hand on a few experts, then the host
kernel bit for bit against the reference at tails (token and expert counts off any block size), with
every optional input, NaN/Inf where the op allows them, and upstream's own checks (selection equal to
torch's FP32 formula, weights and scores within allclose, random rows distinct and uniform). On every
backend (the Ascend kernel on the twin included): every option at token rows past its 64-row tile and
expert counts off its 8-lane block, strided outputs, 256 experts top-8 without options, NaN/Inf biases
and non-finite unrouted rows; no tokens (answered before any backend). The kernel's clamping of unchecked device values is in
tests/tile_kernels/ascend/test_moe_topk_gate.py."""
import math
import os

import pytest
import torch
import torch.nn.functional as F

from tile_kernels.moe import moe_topk_gate, moe_topk_gate_forward
from tile_kernels.reference import moe_topk_gate as ref
from tile_kernels.reference.moe_topk_gate import random_rows, sqrt_softplus


def _f32(v: float) -> float:
    return torch.tensor(v, dtype=torch.float32).item()


def _run(backend, logits, k, shared, scale, ep_rank, **kw):
    os.environ["TK_BACKEND"] = backend
    try:
        return moe_topk_gate_forward(logits, k, shared > 0, max(shared, 1) if shared else 0, scale, ep_rank, **kw)
    finally:
        del os.environ["TK_BACKEND"]


def test_reference_by_hand_on_4_experts():
    logits = torch.tensor([[0.0, 1.0, -1.0, 25.0], [0.5, 0.5, 0.5, 0.5]])
    sp = [math.sqrt(math.log1p(math.exp(v))) for v in (0.0, 1.0, -1.0)] + [math.sqrt(25.0)]
    scores = torch.empty(2, 4)
    ids, w = _run("reference", logits, 2, 0, 2.0, 0, scores=scores)
    assert scores[0].tolist() == [_f32(v) for v in sp]           # FP64 rounded once; identity above 20
    assert ids.tolist() == [[3, 1], [0, 1]]                        # row 1: four-way tie -> lowest ids
    assert w[0].tolist() == pytest.approx([2 * sp[3] / (sp[3] + sp[1]), 2 * sp[1] / (sp[3] + sp[1])], rel=1e-6)
    # the bias ranks (expert 2 wins) but the weights stay unbiased scores
    ids, w = _run("reference", logits[:1], 2, 0, 1.0, 0, bias=torch.tensor([0.0, 0.0, 9.0, 0.0]))
    assert ids.tolist() == [[2, 3]]
    assert w[0].tolist() == pytest.approx([sp[2] / (sp[2] + sp[3]), sp[3] / (sp[2] + sp[3])], rel=1e-6)
    # image tokens rank with image_bias instead
    ids, _ = _run("reference", logits, 1, 0, 1.0, 0, bias=torch.zeros(4), image_bias=torch.tensor([0, 0, 0, 1.0]),
                  image_token_mask=torch.tensor([False, True]))
    assert ids.tolist() == [[3], [3]]
    # one shared slot of weight 1 (id E), then replicas: (ep_rank + t * 23333) % count
    count = torch.tensor([1, 2, 1, 3, 2], dtype=torch.int32)
    phys = torch.arange(15, dtype=torch.int32).view(5, 3) + 100
    unmapped = torch.empty(2, 2, dtype=torch.int64)
    ids, w = _run("reference", logits, 2, 1, 1.0, 1, to_physical_map=phys, logical_count=count,
                  unmapped_topk_idx=unmapped)
    assert unmapped.tolist() == [[3, 1], [0, 1]] and w[:, 2].tolist() == [1.0, 1.0]
    assert ids.tolist() == [[100 + 3 * 3 + 1 % 3, 100 + 3 * 1 + 1 % 2, 100 + 3 * 4 + 1 % 2],
                            [100 + 0, 100 + 3 * 1 + 23334 % 2, 100 + 3 * 4 + 23334 % 2]]


def test_sqrt_softplus_rounds_the_exact_value_once():
    x = torch.tensor([-200.0, -30.0, -1e-3, 0.0, 1e-7, 3.0, 19.99, 20.0, 20.5, 1e30])
    exact = [math.sqrt(v if v > 20 else math.log1p(math.exp(v))) for v in x.tolist()]
    assert sqrt_softplus(x).tolist() == [_f32(v) for v in exact]


def _inputs(tokens, experts, k, shared, fix=True, force=True, images=True, replicas=True):
    extra = 3
    logits = torch.randn(tokens, experts) * 4
    mask = torch.rand(tokens) > 0.2
    kw = dict(mask=mask, bias=torch.randn(experts) * 0.1)
    if images:
        kw.update(image_bias=torch.randn(experts) * 0.1, image_token_mask=torch.rand(tokens) < 0.5)
    # a strided (column-slice) unmapped_topk_idx, as upstream allows
    kw["unmapped_topk_idx"] = torch.stack([torch.randperm(experts)[:k] for _ in range(tokens)]) if tokens else \
        torch.empty(0, k, dtype=torch.int64)
    kw["unmapped_topk_idx"] = torch.cat([kw["unmapped_topk_idx"], torch.zeros(tokens, 3, dtype=torch.int64)], 1)[:, :k]
    if fix:
        kw["fix_routing_mask"] = torch.rand(tokens) < 0.3
    if force:
        kw["force_random"] = torch.rand(tokens) < 0.25
    if replicas:
        count = torch.randint(1, extra + 1, (experts + shared,), dtype=torch.int32)
        kw["to_physical_map"] = torch.randperm((experts + shared) * extra).to(torch.int32).view(-1, extra)
        kw["logical_count"] = count
    return logits, kw


def _clone(kw):
    return {n: v.clone() if n == "unmapped_topk_idx" else v for n, v in kw.items()}


def _both(logits, k, shared, scale, ep_rank, kw, out_strided=False):
    """(ids, weights, unmapped, scores) from the host kernel and from the reference."""
    results = []
    for backend in ("host", "reference"):
        args = _clone(kw)
        scores = torch.full(logits.shape, 7.0)
        extra = dict(scores=scores)
        if out_strided:
            width = k + shared
            extra["out"] = (torch.full((logits.shape[0], width + 2), 5, dtype=torch.int64)[:, 1:-1],
                            torch.full((logits.shape[0], width + 2), 5.0)[:, 1:-1])
        ids, w = _run(backend, logits, k, shared, scale, ep_rank, **args, **extra)
        if out_strided:
            assert ids is extra["out"][0] and w is extra["out"][1]
        results.append((ids, w, args["unmapped_topk_idx"], scores))
    return results


@pytest.mark.parametrize("tokens,experts,k,shared", [(1, 4, 1, 0), (7, 30, 6, 2), (33, 72, 6, 1), (130, 256, 8, 2),
                                                     (65, 5, 5, 0), (0, 16, 2, 1)])
@pytest.mark.parametrize("out_strided", [False, True])
def test_host_matches_reference_bit_for_bit(tokens, experts, k, shared, out_strided):
    logits, kw = _inputs(tokens, experts, k, shared)
    host, reference = _both(logits, k, shared, 1 / 3, 5, kw, out_strided)
    for name, h, r in zip(("topk_idx", "topk_weights", "unmapped_topk_idx", "scores"), host, reference, strict=True):
        assert torch.equal(h, r), name
    if tokens:
        assert (host[0] >= 0).any() and (host[3] != 0).any()


@pytest.mark.parametrize("fix,force,images,replicas", [(False, False, False, False), (True, False, True, False),
                                                       (False, True, False, True)])
def test_host_matches_reference_per_option(fix, force, images, replicas):
    logits, kw = _inputs(41, 36, 4, 1, fix, force, images, replicas)
    kw["mask"] = None
    for h, r in zip(*_both(logits, 4, 1, 1.5, 2, kw), strict=True):
        assert torch.equal(h, r)


def test_nan_and_inf_where_the_op_allows_them():
    """Biases may hold NaN (ranks first, as torch's sort) or +-Inf; unrouted rows (masked or forced random)
    may hold any logits. Routed rows with a non-finite logit are refused (upstream's kernel asserts)."""
    tokens, experts, k = 12, 20, 3
    logits, kw = _inputs(tokens, experts, k, 0, fix=False, images=False, replicas=False)
    kw["bias"] = kw["bias"].index_fill(0, torch.tensor([4, 9]), float("nan")).index_fill(
        0, torch.tensor([1]), float("inf")).index_fill(0, torch.tensor([2]), -float("inf"))
    kw["mask"][:2] = False
    kw["force_random"][:2] = False
    kw["force_random"][2] = True
    logits[0, 3], logits[1, :] = float("nan"), float("inf")
    logits[2, 5] = -float("inf")
    logits[3, 6], logits[4, 7] = 1e30, -1e30                      # finite extremes: sqrt(x) and 0
    host, reference = _both(logits, k, 0, 1.0, 0, kw)
    for h, r in zip(host, reference, strict=True):
        assert torch.equal(h, r)
    routed = kw["mask"] & ~kw["force_random"]
    assert (host[0][routed][:, 0] == 4).all() and (host[0][routed][:, 1] == 9).all()   # NaN biases first
    assert (host[0][routed][:, 2] == 1).all()                                          # then +Inf
    assert host[3][3, 6].item() == _f32(math.sqrt(_f32(1e30))) and host[3][4, 7].item() == 0.0
    logits[5, 0] = float("inf")
    kw["mask"][5], kw["force_random"][5] = True, False
    with pytest.raises(ValueError, match="logits"):
        moe_topk_gate_forward(logits, k, False, 0, 1.0, 0, **_clone(kw))


ALL_OPTIONS = (36, 4, 1)      # experts, top-k, shared: one Ascend lowering with every option
REF_ARGS = ("mask", "bias", "image_bias", "image_token_mask", "fix_routing_mask", "to_physical_map", "logical_count",
            "unmapped_topk_idx", "force_random")


def _seeded_inputs(tokens, experts, k, shared, seed, options=True):
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
    un = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(tokens)]) if tokens else \
        torch.empty(0, k, dtype=torch.int64)
    kw["unmapped_topk_idx"] = torch.cat([un, torch.full((tokens, 2), 9, dtype=torch.int64)], 1)[:, :k]  # a slice
    return logits, kw


def _against_reference(backend, logits, k, shared, scale, ep_rank, kw, out_strided=False):
    """The public op on ``backend`` against the reference: ids and unmapped ids exact, weights and scores to
    upstream's allclose (the Ascend kernel's FP32 sqrt(softplus) against the reference's FP64-rounded one;
    the host kernel is bit-exact: test_host_matches_reference_bit_for_bit). Returns the op's
    (ids, weights, unmapped, scores)."""
    t, e = logits.shape
    width = k + shared
    outs = []
    for _ in range(2):
        if out_strided:
            outs.append((torch.full((t, width + 2), 5, dtype=torch.int64)[:, 1:-1], torch.full((t, width + 2), 5.0)[:, 1:-1]))
        else:
            outs.append((torch.full((t, width), 5, dtype=torch.int64), torch.full((t, width), 5.0)))
    scores, scores_ref = torch.full((t, e), 7.0), torch.full((t, e), 7.0)
    kw_ref = _clone(kw)
    ids, w = moe_topk_gate_forward(logits, k, shared > 0, shared, scale, ep_rank, **kw, out=outs[0], scores=scores)
    assert ids is outs[0][0] and w is outs[0][1]
    assert backend != "ascend" or backend.served == ["moe_topk_gate_forward"]
    ref.moe_topk_gate_forward(logits, k, shared, scale, ep_rank, *[kw_ref.get(n) for n in REF_ARGS], *outs[1],
                              scores_ref)
    assert torch.equal(ids, outs[1][0])
    assert torch.allclose(w, outs[1][1], equal_nan=True)
    if "unmapped_topk_idx" in kw:
        assert torch.equal(kw["unmapped_topk_idx"], kw_ref["unmapped_topk_idx"])
    assert torch.allclose(scores, scores_ref, equal_nan=True)
    return ids, w, kw.get("unmapped_topk_idx"), scores


@pytest.mark.parametrize("tokens,out_strided", [(70, False), (37, True)])  # 70: past the Ascend 64-row tile
def test_every_option_matches_reference(backend, tokens, out_strided):
    experts, k, shared = ALL_OPTIONS
    logits, kw = _seeded_inputs(tokens, experts, k, shared, tokens)
    ids, _, _, scores = _against_reference(backend, logits, k, shared, 1 / 3, 5, kw, out_strided)
    forced = kw["force_random"] & kw["mask"]
    assert forced.any() and (ids[forced] >= 0).all()          # the random draws were compared exactly
    assert (scores[~kw["mask"] | forced] == 0).all()


@pytest.mark.parametrize("tokens", [70, 33])
def test_plain_router_at_256_experts(backend, tokens):
    """DeepSeek's 256 experts top-8, no option (the Ascend ascend-check lowering)."""
    logits, kw = _seeded_inputs(tokens, 256, 8, 0, 7, options=False)
    logits[0, :12] = 0.5  # a tie: the smaller expert id first
    _against_reference(backend, logits, 8, 0, 2.5, 0, kw)


def test_no_tokens():
    """The op answers before any backend is chosen (no launch), with every option given."""
    experts, k, shared = ALL_OPTIONS
    logits, kw = _seeded_inputs(0, experts, k, shared, 1)
    ids, w, _, scores = _against_reference(None, logits, k, shared, 1.0, 0, kw)
    assert ids.shape == (0, k + shared) and w.shape == (0, k + shared) and scores.shape == (0, experts)


def test_nan_and_inf_on_every_backend(backend):
    """NaN biases rank first (torch's sort), then +Inf; unrouted rows may hold any logits; finite extremes;
    with every option on."""
    experts, k, shared = ALL_OPTIONS
    logits, kw = _seeded_inputs(12, experts, k, shared, 3)
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
    _, _, unmapped, _ = _against_reference(backend, logits, k, shared, 1.0, 0, kw)
    assert unmapped[3, :3].tolist() == [4, 9, 1]                 # NaN, NaN, +Inf first


def _near_ties(scores, bias, k):
    """Tokens whose top-k boundary or order hinges on a gap of a few ulps (there FP32 torch and the
    FP64-rounded scores may order differently, as upstream's kernel and oracle may)."""
    top = (scores + bias).topk(k + 1).values
    return ((top[:, :-1] - top[:, 1:]).abs() <= 4e-7 * top[:, :-1].abs().clamp(min=1)).any(1)


def test_upstreams_checks_against_torchs_fp32_formula():
    """Upstream's test: indices (sorted) equal to the oracle's F.softplus(x).sqrt() selection, weights and
    scores allclose to it (its CPU/CUDA oracle is FP32 torch)."""
    tokens, experts, k = 600, 256, 8
    logits, bias = torch.randn(tokens, experts) * 3, torch.randn(experts) * 0.1
    scores = torch.empty(tokens, experts)
    ids, w = moe_topk_gate_forward(logits, k, False, 0, 1.5, 0, bias=bias, scores=scores)
    torch_scores = F.softplus(logits).sqrt()
    assert torch.allclose(scores, torch_scores)
    chosen = (torch_scores + bias).sort(dim=1, descending=True, stable=True).indices[:, :k]
    picked = torch_scores.gather(1, chosen)
    torch_w = picked / (picked.sum(1, keepdim=True) + 1e-20) * 1.5
    keep = ~_near_ties(torch_scores, bias, k)
    assert keep.float().mean() > 0.9
    assert torch.equal(ids[keep].sort(1).values, chosen[keep].sort(1).values)
    assert torch.allclose(w[keep].sort(1).values, torch_w[keep].sort(1).values)


def test_random_rows_distinct_uniform_and_seeded(backend):
    tokens, experts, k, shared, extra = 3000, 16, 6, 2, 2
    logits = torch.randn(tokens, experts)
    count = torch.full((experts + shared,), extra, dtype=torch.int32)
    count[::3] = 1
    phys = torch.arange((experts + shared) * extra, dtype=torch.int32).view(-1, extra)
    unmapped = torch.zeros(tokens, k, dtype=torch.int64)
    scores = torch.ones(tokens, experts)
    kw = dict(force_random=torch.ones(tokens, dtype=torch.bool), to_physical_map=phys, logical_count=count)
    ids, w = moe_topk_gate_forward(logits, k, True, shared, 1.0, 3, unmapped_topk_idx=unmapped, scores=scores, **kw)
    physical = int(count.sum())
    assert ((ids >= 0) & (ids < physical)).all() and ((w > 0) & (w <= 1)).all()
    assert all(len(set(row)) == k + shared for row in ids.tolist())
    assert (unmapped == -1).all() and (scores == 0).all()
    counts = torch.bincount(ids.flatten(), minlength=physical).float()
    expected = ids.numel() / physical
    assert ((counts - expected) ** 2 / expected).sum() < 4 * (physical - 1)   # upstream's chi-squared bound
    again, _ = moe_topk_gate_forward(logits, k, True, shared, 1.0, 3, **kw)
    other_rank, _ = moe_topk_gate_forward(logits, k, True, shared, 1.0, 4, **kw)
    assert torch.equal(ids, again) and not torch.equal(ids, other_rank)


def test_random_rows_pick_every_free_id_in_order():
    """Slot j takes the (word % (P - j))-th id not yet taken: with P = width the row is a permutation."""
    ids, _ = random_rows(torch.arange(200), 5, 5, 0)
    assert (ids.sort(1).values == torch.arange(5)).all()


def test_all_zero_logits_pick_the_lowest_ids(backend):
    """Upstream's stability check: equal scores -> experts 0..k-1 in order."""
    unmapped = torch.empty(9, 6, dtype=torch.int64)
    moe_topk_gate(torch.zeros(9, 40), 6, False, 0, 1.0, 0, unmapped_topk_idx=unmapped)
    assert (unmapped == torch.arange(6)).all()
