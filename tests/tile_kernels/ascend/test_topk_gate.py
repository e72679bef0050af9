"""tile_kernels.ascend.routing.topk_gate on the Ascend twin: exact against the reference stable top-k
(descending score, ties -> smaller index) at ragged token counts, including rows of ties and -inf."""
import pytest
import torch

from tile_kernels.ascend import routing
from tile_kernels.reference import topk as ref

from .inputs import tied_scores


@pytest.mark.parametrize("tokens,experts,k", [(37, 72, 6), (70, 256, 8)])
def test_matches_stable_topk(tokens, experts, k):
    s = tied_scores(tokens, experts)
    assert torch.equal(routing.topk_gate(s, k), ref.stable_topk(s, k))


def test_empty_input_launches_nothing():
    assert routing.topk_gate(torch.empty(0, 72), 6).shape == (0, 6)
