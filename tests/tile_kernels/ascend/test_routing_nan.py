"""NaN scores on tile_kernels' Ascend routing kernels (twin) pick the experts the reference picks: torch's
stable descending sort ranks NaN first (NaNs among themselves by index), and a NaN among a token's chosen
scores makes its weights NaN as the reference's clamped sum does."""
import pytest
import torch

from tile_kernels.ascend import routing
from tile_kernels.reference import topk as ref


def _with_nans(t: int, e: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(t, e, generator=g)
    s[0, 5] = s[0, 40] = float("nan")    # two NaNs: both first, the smaller index first
    s[1, e - 1] = float("nan")           # the last expert
    s[2, :] = float("nan")               # all NaN: indices in order
    s[3, 7], s[3, 9] = float("nan"), float("inf")   # NaN ranks above +inf
    s[4, 11] = float("-inf")
    return s


def test_topk_gate_nan_scores():
    s = _with_nans(9, 64, 1)
    assert torch.equal(routing.topk_gate(s, 6), ref.stable_topk(s, 6))


@pytest.mark.parametrize("scoring,groups", [("sigmoid", (8, 2)), ("softmax", (0, 0)), ("sqrtsoftplus", (4, 2))])
def test_top2_sum_gate_nan_logits(scoring, groups):
    logits, bias = _with_nans(9, 64, 2), torch.randn(64) * 0.1
    args = (logits, bias, 6, groups[1], groups[0], False, 0, 1.5, 0, 1, 0, 1, scoring)
    idx, w = routing.top2_sum_gate(*args)
    idx_ref, w_ref = ref.top2_sum_gate(*args)
    assert torch.equal(idx, idx_ref)
    torch.testing.assert_close(w, w_ref, equal_nan=True)
