"""tile_kernels.ascend.routing.top2_sum_gate on the Ascend twin against the reference router: indices
exact, weights allclose (upstream's tolerance: the cores' exp/log differ from torch's by rounding),
over every scoring function, group limits, shared experts, routed scaling and TP masking, and the
options: token mask, fixed routing, unmapped ids written back, physical replicas."""
import pytest
import torch

from tile_kernels.ascend import routing
from tile_kernels.reference import topk as ref

from .inputs import router_options

CASES = [  # scoring, experts, k, (num_groups, num_topk_groups), shared, scale, (ep_rank, ep), (tp_rank, tp)
    ("sigmoid", 64, 6, (8, 2), 1, 2.5, (0, 1), (0, 1)),
    ("softmax", 64, 4, (0, 0), 0, 1.0, (1, 2), (1, 2)),
    ("sqrtsoftplus", 72, 8, (4, 2), 2, 1.5, (0, 4), (0, 1)),
]


@pytest.mark.parametrize("scoring,experts,k,groups,shared,scale,ep,tp", CASES)
def test_matches_reference(scoring, experts, k, groups, shared, scale, ep, tp):
    # seeded: the cores' exp/log differ from torch's by rounding, so a near-tie from the global RNG state
    # (which earlier tests move) could rank the other way
    g = torch.Generator().manual_seed(experts + k)
    logits, bias = torch.randn(37, experts, generator=g), torch.randn(experts, generator=g) * 0.1
    logits[0, :8] = 0.5  # ties in the ranking: the smaller expert id first
    args = (logits, bias, k, groups[1], groups[0], shared > 0, shared, scale, ep[0], ep[1], tp[0], tp[1], scoring)
    idx, w = routing.top2_sum_gate(*args)
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
def test_options_match_reference(use_mask, use_fix, use_unmapped, map_cols):
    logits, bias, mask, fix, phys, count, unmapped = router_options(use_mask, use_fix, use_unmapped, map_cols)
    args = (logits, bias, 4, 2, 4, True, 1, 1.5, 1, 2, 1, 2, "sigmoid")
    un_ref = None if unmapped is None else unmapped.clone()
    idx, w = routing.top2_sum_gate(*args, mask, fix, phys, count, unmapped)
    idx_ref, w_ref = ref.top2_sum_gate(*args, mask, fix, phys, count, un_ref)
    assert torch.equal(idx, idx_ref)
    assert torch.allclose(w, w_ref)
    if unmapped is not None:
        assert torch.equal(unmapped, un_ref)
    if mask is not None:
        assert bool((idx[~mask] == -1).all()) and bool((w[~mask] == 0).all())


def test_public_op_serves_the_options(monkeypatch):
    import tile_kernels
    from tile_kernels import _dispatch

    monkeypatch.setenv("TK_BACKEND", "ascend")
    logits, bias = torch.randn(9, 16), torch.zeros(16)
    mask, unmapped = torch.arange(9) % 3 != 0, torch.zeros(9, 2, dtype=torch.int64)
    args = (logits, bias, 2, 0, 0, False, 0, 1.0, 0, 1, 0, 1, "softmax", mask, None, None, None, unmapped)
    assert _dispatch.TABLE.serves("top2_sum_gate", logits.device, *args) == "ascend"
    un_ref = unmapped.clone()
    idx, _ = tile_kernels.moe.top2_sum_gate(logits, bias, 2, 0, 0, False, 0, 1.0, 0, 1, 0, 1, "softmax", mask=mask,
                                            unmapped_topk_idx=unmapped)
    assert torch.equal(idx, ref.top2_sum_gate(*args[:13], mask, None, None, None, un_ref)[0])
    assert torch.equal(unmapped, un_ref)
