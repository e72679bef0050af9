"""tile_kernels.ascend.routing.top2_sum_gate on the Ascend twin against the reference router: indices
exact, weights allclose (upstream's tolerance: the cores' exp/log differ from torch's by rounding),
over every scoring function, group limits, shared experts, routed scaling and TP masking."""
import pytest
import torch

from tile_kernels.ascend import routing
from tile_kernels.reference import topk as ref

CASES = [  # scoring, experts, k, (num_groups, num_topk_groups), shared, scale, (ep_rank, ep), (tp_rank, tp)
    ("sigmoid", 64, 6, (8, 2), 1, 2.5, (0, 1), (0, 1)),
    ("softmax", 64, 4, (0, 0), 0, 1.0, (1, 2), (1, 2)),
    ("sqrtsoftplus", 72, 8, (4, 2), 2, 1.5, (0, 4), (0, 1)),
]


@pytest.mark.parametrize("scoring,experts,k,groups,shared,scale,ep,tp", CASES)
def test_matches_reference(scoring, experts, k, groups, shared, scale, ep, tp):
    logits, bias = torch.randn(37, experts), torch.randn(experts) * 0.1
    logits[0, :8] = 0.5  # ties in the ranking: the smaller expert id first
    args = (logits, bias, k, groups[1], groups[0], shared > 0, shared, scale, ep[0], ep[1], tp[0], tp[1], scoring)
    idx, w = routing.top2_sum_gate(*args)
    idx_ref, w_ref = ref.top2_sum_gate(*args)
    assert torch.equal(idx, idx_ref)
    assert torch.allclose(w, w_ref)


def test_masks_are_left_to_other_backends():
    with pytest.raises(NotImplementedError, match="mask"):
        routing.top2_sum_gate(torch.randn(4, 64), torch.zeros(64), 2, 0, 0, False, 0, 1.0, 0, 1, 0, 1, "sigmoid",
                              mask=torch.ones(4, dtype=torch.bool))
