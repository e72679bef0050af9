"""tile_kernels.ascend.routing.topk_gate on the Ascend twin: exact against the reference stable top-k
(descending score, ties -> smaller index) at ragged token counts, including rows of ties and -inf."""
import pytest
import torch

from tile_kernels.ascend import routing
from tile_kernels.reference import topk as ref


@pytest.mark.parametrize("tokens,experts,k", [(37, 72, 6), (70, 256, 8)])
def test_matches_stable_topk(tokens, experts, k):
    s = torch.randn(tokens, experts)
    s[0, :10] = 1.0  # ties: the smaller index first
    s[1] = 0.0
    s[2, ::2] = -float("inf")
    s[3, 5] = -0.0  # -0.0 ties with 0.0
    s[3, 7] = 0.0
    assert torch.equal(routing.topk_gate(s, k), ref.stable_topk(s, k))


def test_empty_input_launches_nothing():
    assert routing.topk_gate(torch.empty(0, 72), 6).shape == (0, 6)
