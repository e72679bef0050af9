"""topk_gate and topk_sum_and_topk_group_idx on every backend (the Ascend kernels on the twin included):
exact against the stable-sort references, with ties, -0.0 == 0.0, -inf and NaN scores and empty inputs."""
import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.testing.numeric import assert_equal

from .._twin import twin_subset


def test_stable_topk_by_hand():
    s = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0]])
    assert ref.stable_topk(s, 3).tolist() == [[1, 2, 4]]
    g = torch.tensor([[[1.0, 5.0, 0.0], [2.0, 2.0, 2.0], [6.0, 0.0, 0.0]]])
    assert ref.topk_sum_and_topk_group_idx(g, 2, 2).tolist() == [[0, 2]]  # sums 6, 4, 6: the tie keeps id order
    assert ref.topk_sum_and_topk_group_idx(g, 1, 1).tolist() == [[2]]


@pytest.mark.parametrize("experts,k", [(72, 6), (32, 6), (16, 6), (108, 6), (256, 8)])
def test_topk_gate(backend, experts, k):
    s = torch.randn(301, experts)
    s[0] = 0.0                     # a row of ties: the smaller index first
    s[1, ::2] = -float("inf")
    s[2, 5], s[2, 7] = -0.0, 0.0   # -0.0 == 0.0: a tie too
    for scores in (s, torch.randint(0, 5, (301, experts)).float()):  # the second has ties
        assert_equal(tile_kernels.moe.topk_gate(scores, k), ref.stable_topk(scores, k))
    assert tile_kernels.moe.topk_gate(torch.empty(0, experts), k).shape == (0, k)


GROUPINGS = [(72, 4), (72, 8), (256, 8), (256, 16)]


@pytest.mark.parametrize("experts,groups,num_sum,num_topk_groups", twin_subset(
    [(*g, s, k) for k in (2, 4) for s in (1, 2) for g in GROUPINGS],
    [(*g, 1 + i % 2, 2 + 2 * (i // 2)) for i, g in enumerate(GROUPINGS)],
    why="the twin runs each grouping once, num_sum and num_topk_groups varying"))
def test_topk_sum_and_topk_group_idx(backend, experts, groups, num_sum, num_topk_groups):
    scores = torch.randn(200, groups, experts // groups)
    out = tile_kernels.moe.topk_sum_and_topk_group_idx(scores, num_sum, num_topk_groups)
    assert_equal(out, ref.topk_sum_and_topk_group_idx(scores, num_sum, num_topk_groups))


@pytest.mark.parametrize("groups,per_group", [(8, 32), (5, 3), (32, 1)])
def test_topk_sum_and_topk_group_idx_ties(backend, groups, per_group):
    """Integer scores make equal group sums common: the smaller group id must come first."""
    scores = torch.randint(0, 3, (333, groups, per_group)).float()
    for num_sum in (1, min(2, per_group)):
        for k in (1, min(4, groups)):
            out = tile_kernels.moe.topk_sum_and_topk_group_idx(scores, num_sum, k)
            assert_equal(out, ref.topk_sum_and_topk_group_idx(scores, num_sum, k))


def test_topk_sum_and_topk_group_idx_nan(backend):
    """A NaN score makes its group's sum NaN, and NaN ranks first (torch's topk and sort order)."""
    for per_group in (32, 5):
        scores = torch.randn(40, 6, per_group)
        scores[::3, 2, 1] = float("nan")
        scores[::4, 4, 0] = float("nan")
        scores[::5, 0, :] = float("nan")
        for num_sum in (1, 2):
            out = tile_kernels.moe.topk_sum_and_topk_group_idx(scores, num_sum, 3)
            assert_equal(out, ref.topk_sum_and_topk_group_idx(scores, num_sum, 3))


def test_topk_gate_nan_ranks_first(backend):
    scores = torch.randn(4, 40)
    scores[0, 3] = float("nan")
    scores[1, 10] = scores[1, 2] = float("nan")
    scores[2] = float("nan")
    scores[3, 7], scores[3, 9], scores[3, 11] = float("nan"), float("inf"), -float("inf")
    scores[3, 39] = float("nan")   # the last expert
    out = tile_kernels.moe.topk_gate(scores, 5)
    assert out[0, 0] == 3 and out[1, :2].tolist() == [2, 10] and out[2].tolist() == [0, 1, 2, 3, 4]
    assert out[3, :3].tolist() == [7, 39, 9]  # NaN (by index) ranks above +inf
    assert torch.equal(out, ref.stable_topk(scores, 5))
