"""The DeepSeek router: hand-computed cases on 4 experts for the reference, then the host kernel
against the reference over upstream's grid; on every backend (the Ascend kernel on the twin included):
each scoring function with group limits, shared experts, routed scaling and EP/TP masking, the options
(token mask, fixed routing, unmapped ids written back, a strided one too, physical replicas), all-zero and
NaN/+-Inf logits.
The Ascend kernel's clamping of unvalidated device values is in
tests/tile_kernels/ascend/test_unvalidated_device_values.py."""
import math

import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.reference.topk import scores_of

from ..ascend.inputs import router_options

gate = tile_kernels.moe.top2_sum_gate


def _sig(v):
    return 1 / (1 + math.exp(-v))


def _route(logits, bias, k=2, groups=(0, 0), scoring="sigmoid", shared=0, ep=(0, 1), tp=(0, 1), mask=None):
    return ref.top2_sum_gate(torch.tensor([logits]), torch.tensor(bias), k, groups[1], groups[0], shared > 0, shared,
                             1.0, ep[0], ep[1], tp[0], tp[1], scoring, mask=mask)


def test_router_by_hand_on_4_experts():
    logits = [0.0, 1.0, -1.0, 2.0]
    idx, w = _route(logits, [0.0] * 4)
    assert idx.tolist() == [[3, 1]]
    s = [_sig(v) for v in logits]
    assert torch.allclose(w, torch.tensor([[s[3] / (s[3] + s[1]), s[1] / (s[3] + s[1])]]))
    # bias changes the ranking but never the weights
    idx, w = _route(logits, [0.0, 0.0, 1.0, 0.0])
    assert idx.tolist() == [[2, 3]]
    assert torch.allclose(w, torch.tensor([[s[2] / (s[2] + s[3]), s[3] / (s[2] + s[3])]]))
    # softmax ranks on raw logits + bias; weights are the softmax scores renormalised over the pick
    idx, w = _route(logits, [0.0, 0.0, 2.5, 0.0], scoring="softmax")
    assert idx.tolist() == [[3, 2]]
    e = [math.exp(v) for v in logits]
    assert torch.allclose(w, torch.tensor([[e[3] / (e[3] + e[2]), e[2] / (e[3] + e[2])]]))
    # sqrt(softplus)
    idx, w = _route(logits, [0.0] * 4, scoring="sqrtsoftplus")
    sp = [math.sqrt(math.log1p(math.exp(v))) for v in logits]
    assert idx.tolist() == [[3, 1]] and torch.allclose(w, torch.tensor([[sp[3], sp[1]]]) / (sp[3] + sp[1]))


def test_group_limited_and_ties_by_hand():
    # groups {0,1} and {2,3}: group 0 sums to more although expert 3 is the single best
    idx, _ = _route([1.0, 1.0, -3.0, 3.0], [0.0] * 4, groups=(2, 1))
    assert idx.tolist() == [[0, 1]]
    idx, _ = _route([1.0, 1.0, -3.0, 3.0], [0.0] * 4)
    assert idx.tolist() == [[3, 0]]  # without groups; the 0/1 tie goes to the lower id


def test_masks_shared_slots_and_tp_by_hand():
    logits = [0.0, 1.0, -1.0, 2.0]
    # 2 EP ranks x 2 TP ranks seen from tp rank 1: experts 2, 3 are local (renumbered 0, 1)
    idx, w = _route(logits, [0.0] * 4, ep=(0, 2), tp=(1, 2))
    assert idx.tolist() == [[1, -1]]
    assert w[0, 1] > 0  # masking changes indices, not weights
    idx, w = _route(logits, [0.0] * 4, shared=1)
    assert idx.tolist() == [[3, 1, 4]] and w[0, 2].item() == 1.0
    idx, w = _route(logits, [0.0] * 4, mask=torch.tensor([False]))
    assert idx.tolist() == [[-1, -1]] and w.tolist() == [[0.0, 0.0]]


def _clear_near_ties(logits, bias, k, groups, scoring, mask):
    """Drop (mask out) tokens whose selection would hinge on a near tie (as upstream redraws)."""
    s = scores_of(logits, scoring)
    r = (logits if scoring == "softmax" else s) + bias
    top = r.topk(min(k + 1, r.shape[1])).values
    close = ((top[:, :-1] - top[:, 1:]).abs() < 2e-6).any(1)
    if groups[0] != groups[1]:
        g = r.view(r.shape[0], groups[0], -1).topk(2).values.sum(-1).sort(1, descending=True).values
        close |= (g[:, groups[1] - 1] - g[:, groups[1]]).abs() < 1e-6
        close |= ((g[:, :-1] - g[:, 1:]).abs() < 1e-6).any(1)
    return mask & ~close


@pytest.mark.parametrize("groups,experts,shared,k", [((0, 0), 72, 1, 6), ((0, 0), 32, 2, 6), ((0, 0), 144, 2, 6),
                                                     ((8, 8), 256, 2, 8), ((8, 4), 256, 2, 8)])
@pytest.mark.parametrize("scoring", ["sigmoid", "sqrtsoftplus", "softmax"])
@pytest.mark.parametrize("fix_routing", [False, True])
def test_host_matches_reference(host, groups, experts, shared, k, scoring, fix_routing):
    tokens, extra, ep = 96, 32, 4
    logits = torch.randn(tokens, experts)
    bias = torch.randn(experts) * 0.1
    mask = torch.ones(tokens, dtype=torch.bool)
    mask[-10:] = False
    mask = _clear_near_ties(logits, bias, k, groups, scoring, mask)
    fix = torch.rand(tokens) < 0.3 if fix_routing else None
    unmapped = torch.stack([torch.randperm(experts)[:k] for _ in range(tokens)])
    phys = torch.arange(experts + shared, dtype=torch.int32).unsqueeze(1).repeat(1, extra + 1)
    count = torch.ones(experts + shared, dtype=torch.int32)
    for tp_rank in range(2):
        args = (logits, bias, k, groups[1], groups[0], True, shared, 1.5, 1, ep, tp_rank, 2, scoring, mask)
        um_a, um_b = unmapped.clone(), unmapped.clone()
        idx, w = gate(*args, fix, phys, count, um_a)
        idx_ref, w_ref = ref.top2_sum_gate(*args, fix, phys, count, um_b)
        assert torch.equal(idx.sort(1).values, idx_ref.sort(1).values)
        assert torch.equal(um_a.sort(1).values, um_b.sort(1).values)
        assert torch.allclose(w.sort(1).values, w_ref.sort(1).values)
        assert (idx >= 0).any()


CASES = [  # scoring, experts, k, (num_groups, num_topk_groups), shared, scale, (ep_rank, ep), (tp_rank, tp)
    ("sigmoid", 64, 6, (8, 2), 1, 2.5, (0, 1), (0, 1)),
    ("softmax", 64, 4, (0, 0), 0, 1.0, (1, 2), (1, 2)),
    ("sqrtsoftplus", 72, 8, (4, 2), 2, 1.5, (0, 4), (0, 1)),
]


@pytest.mark.parametrize("scoring,experts,k,groups,shared,scale,ep,tp", CASES)
def test_matches_reference(backend, scoring, experts, k, groups, shared, scale, ep, tp):
    """Indices exact, weights to upstream's allclose (the Ascend cores' exp/log differ from torch's by
    rounding)."""
    # seeded: near-ties from the global RNG state (which earlier tests move) could rank the other way there
    g = torch.Generator().manual_seed(experts + k)
    logits, bias = torch.randn(37, experts, generator=g), torch.randn(experts, generator=g) * 0.1
    logits[0, :8] = 0.5  # ties in the ranking: the smaller expert id first
    args = (logits, bias, k, groups[1], groups[0], shared > 0, shared, scale, ep[0], ep[1], tp[0], tp[1], scoring)
    idx, w = gate(*args)
    assert backend != "ascend" or backend.served == ["top2_sum_gate"]
    idx_ref, w_ref = ref.top2_sum_gate(*args)
    assert torch.equal(idx, idx_ref)
    assert torch.allclose(w, w_ref)


OPTION_CASES = [  # mask, fix_routing_mask (with unmapped_topk_idx), unmapped_topk_idx, to_physical_map columns
    (True, False, False, 0),
    (False, True, True, 0),
    (True, True, True, 0),
    (False, False, True, 0),
    (False, False, False, 3),
    (True, True, True, 2),
]


@pytest.mark.parametrize("use_mask,use_fix,use_unmapped,map_cols", OPTION_CASES)
def test_options_match_reference(backend, use_mask, use_fix, use_unmapped, map_cols):
    logits, bias, mask, fix, phys, count, unmapped = router_options(use_mask, use_fix, use_unmapped, map_cols)
    args = (logits, bias, 4, 2, 4, True, 1, 1.5, 1, 2, 1, 2, "sigmoid")
    un_ref = None if unmapped is None else unmapped.clone()
    idx, w = gate(*args, mask=mask, fix_routing_mask=fix, to_physical_map=phys, logical_count=count,
                  unmapped_topk_idx=unmapped)
    assert backend != "ascend" or backend.served == ["top2_sum_gate"]
    idx_ref, w_ref = ref.top2_sum_gate(*args, mask, fix, phys, count, un_ref)
    assert torch.equal(idx, idx_ref)
    assert torch.allclose(w, w_ref)
    if unmapped is not None:
        assert torch.equal(unmapped, un_ref)  # written back as the reference writes it
    if mask is not None:
        assert bool((idx[~mask] == -1).all()) and bool((w[~mask] == 0).all())


def test_strided_unmapped_topk_idx_is_written_in_place(backend):
    """A row-strided ``unmapped_topk_idx`` (columns of a wider buffer) is written as the reference writes it
    (the Ascend kernel through a dense copy written back); the rest of the buffer stays untouched."""
    logits, bias = torch.randn(9, 16), torch.zeros(16)
    mask = torch.arange(9) % 3 != 0
    fix = torch.arange(9) % 4 == 1
    buffer = torch.full((9, 5), 7, dtype=torch.int64)
    buffer[:, 1:3] = torch.randint(0, 16, (9, 2))
    unmapped = buffer[:, 1:3]
    assert not unmapped.is_contiguous()
    args = (logits, bias, 2, 0, 0, False, 0, 1.0, 0, 1, 0, 1, "softmax")
    un_ref = unmapped.clone()
    want = ref.top2_sum_gate(*args, mask, fix, None, None, un_ref)
    idx, w = gate(*args, mask=mask, fix_routing_mask=fix, unmapped_topk_idx=unmapped)
    assert backend != "ascend" or backend.served == ["top2_sum_gate"]
    assert torch.equal(idx, want[0]) and torch.allclose(w, want[1])
    assert torch.equal(unmapped, un_ref)
    assert bool((buffer[:, 0] == 7).all()) and bool((buffer[:, 3:] == 7).all())


def test_all_zero_logits_are_stable(backend):
    experts, k, ep = 64, 8, 4
    idx, _ = gate(torch.zeros(16, experts), torch.zeros(experts), k, 0, 0, False, 0, 1.0, 0, ep, 0, 1, "sigmoid")
    n = min(experts // ep, k)
    assert idx[:, :n].tolist() == [list(range(n))] * 16


@pytest.mark.parametrize("groups", [(0, 0), (8, 4)])
@pytest.mark.parametrize("scoring", ["sigmoid", "sqrtsoftplus", "softmax"])
def test_nan_ranks_first_as_in_the_reference(backend, groups, scoring):
    """NaN logits or biases rank above every number (+inf included; torch's sort order), ties to the lower
    id; a row of NaN picks experts 0..k-1. The host kernel used to skip NaN and leave slots unset."""
    experts, k = 64, 6
    logits, bias = torch.randn(8, experts), torch.randn(experts) * 0.1
    logits[0, 5] = logits[1, 40] = logits[1, 3] = float("nan")
    logits[2] = float("nan")
    logits[3, 7], logits[3, 9], logits[3, experts - 1] = float("nan"), float("inf"), float("nan")
    logits[4, 11] = -float("inf")
    for b in (bias, bias.index_fill(0, torch.tensor([7, 50]), float("nan"))):
        args = (logits, b, k, groups[1], groups[0], False, 0, 2.5, 0, 1, 0, 1, scoring)
        idx, w = gate(*args)
        idx_ref, w_ref = ref.top2_sum_gate(*args)
        assert torch.equal(idx, idx_ref)
        assert torch.allclose(w, w_ref, equal_nan=True)
    assert idx_ref[2].tolist() == list(range(k))

