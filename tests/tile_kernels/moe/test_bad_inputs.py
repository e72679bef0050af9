"""MoE ops reject mismatched routing shapes, out-of-range expert ids and wrong dtypes up front."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tile_kernels

M = tile_kernels.moe


@settings(max_examples=30, deadline=None)
@given(bad=st.integers(-100, 100).filter(lambda v: not -1 <= v < 8))
def test_out_of_range_expert_ids(bad):
    idx = torch.zeros(4, 2, dtype=torch.int64)
    idx[1, 1] = bad
    for call in (lambda: M.group_count(idx, 8), lambda: M.aux_fi(idx, 8, 2), lambda: M.get_fused_mapping(idx, 8, 0, 4),
                 lambda: M.inplace_unique_group_indices(idx, 8)):
        with pytest.raises(ValueError, match=rf": expected entries -1 or in \[0, 8\), got values in \[{min(bad, 0)}, "
                                             rf"{max(bad, 0)}\]$"):
            call()
    assert idx[1, 1] == bad  # untouched


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 6), k=st.integers(1, 4), pos=st.integers(-5, 40))
def test_expand_reduce_positions(rows, k, pos):
    x = torch.zeros(rows, 256, dtype=torch.bfloat16)
    t2p = torch.full((rows, k), -1, dtype=torch.int32)
    t2p[0, 0] = pos
    p2e = torch.zeros(16, dtype=torch.int32)
    if -1 <= pos < 16:
        M.expand_to_fused(x, t2p, p2e)
    else:
        with pytest.raises(ValueError, match=r"^token_topk_to_pos: expected entries -1 or in \[0, 16\)"):
            M.expand_to_fused(x, t2p, p2e)
    xe = torch.zeros(16, 256)
    if -1 <= pos < 16:
        M.reduce_fused(xe, None, t2p)
    else:
        with pytest.raises(ValueError, match=r"^token_topk_to_pos: expected entries -1 or in \[0, 16\)"):
            M.reduce_fused(xe, None, t2p)


@pytest.mark.parametrize("backend_name", ["host", "reference"])
def test_expand_refuses_two_slots_on_one_position(monkeypatch, backend_name):
    monkeypatch.setenv("TK_BACKEND", backend_name)
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    t2p = torch.tensor([[0, 1], [2, -1], [1, 3]], dtype=torch.int32)  # (0, 1) and (2, 0) both on row 1
    p2e = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^token_topk_to_pos: expected each position the target of at most one slot, "
                                         r"got 2 slots \(token, k\) \[\[0, 1\], \[2, 0\]\] mapped to position 1$"):
        M.expand_to_fused(x, t2p, p2e)
    sf = torch.ones(3, 2)
    with pytest.raises(ValueError, match="^token_topk_to_pos: expected .* mapped to position 1$"):
        M.expand_to_fused_with_sf((x, sf), 128, t2p, p2e)


def test_router_argument_errors():
    logits, bias = torch.randn(4, 16), torch.zeros(16)
    base = dict(num_topk=4, num_topk_groups=0, num_groups=0, use_shared_as_routed=False, num_shared_experts=0,
                routed_scaling_factor=1.0, ep_rank=0, num_ep_ranks=1, tp_rank=0, num_tp_ranks=1, scoring_func="sigmoid")
    with pytest.raises(ValueError, match=r"^scoring_func: expected one of \[.*'sigmoid'.*\], got 'relu'$"):
        M.top2_sum_gate(logits, bias, **{**base, "scoring_func": "relu"})
    with pytest.raises(ValueError, match=r"^scoring_func: expected .*does not support 'identity'\), got 'identity'$"):
        M.top2_sum_gate(logits, bias, **{**base, "scoring_func": "identity"})
    with pytest.raises(ValueError, match="bias: expected shape"):
        M.top2_sum_gate(logits, torch.zeros(15), **base)
    with pytest.raises(TypeError, match="logits"):
        M.top2_sum_gate(logits.double(), bias, **base)
    with pytest.raises(ValueError, match="num_topk"):
        M.top2_sum_gate(logits, bias, **{**base, "num_topk": 17})
    with pytest.raises(ValueError, match="^num_groups: expected a count dividing the 16 experts into at most 32 groups "
                                         "of 2 to 32, got 3$"):
        M.top2_sum_gate(logits, bias, **{**base, "num_groups": 3, "num_topk_groups": 1})
    with pytest.raises(ValueError, match="tp_rank"):
        M.top2_sum_gate(logits, bias, **{**base, "tp_rank": 1})
    with pytest.raises(ValueError, match=r"^unmapped_topk_idx: expected a tensor \(the fixed selections\) when "
                                         r"fix_routing_mask is given, got None$"):
        M.top2_sum_gate(logits, bias, **base, fix_routing_mask=torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask: expected shape"):
        M.top2_sum_gate(logits, bias, **base, mask=torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="num_topk"):
        M.topk_gate(logits, 0)


_ROUTER_ARGS = {   # (argument, a wrong value for T = 5 tokens, E = 16 experts, top-4)
    "logits": torch.zeros(5, 16, dtype=torch.bfloat16),
    "bias": torch.zeros(15),
    "mask": torch.ones(5, dtype=torch.int32),
    "force_random": torch.zeros(4, dtype=torch.bool),
    "unmapped_topk_idx": torch.zeros(5, 3, dtype=torch.int64),
    "scores": torch.zeros(5, 16, dtype=torch.float64),
    "num_topk": 33,
    "scoring_func": "softmax",
}


@settings(max_examples=24, deadline=None)
@given(name=st.sampled_from(sorted(_ROUTER_ARGS)), out=st.booleans())
def test_moe_topk_gate_forward_refuses_each_bad_argument_by_name(name, out):
    """Each bad argument is refused naming it, before anything is written into a caller's ``out``."""
    kw = {"logits": torch.randn(5, 16), "num_topk": 4, "use_shared_as_routed": False, "num_shared_experts": 0,
          "routed_scaling_factor": 1.0, "ep_rank": 0}
    kw[name] = _ROUTER_ARGS[name]
    if name == "unmapped_topk_idx":
        kw["fix_routing_mask"] = torch.zeros(5, dtype=torch.bool)
    outs = (torch.full((5, 4), -7, dtype=torch.int64), torch.full((5, 4), -7.0)) if out else None
    with pytest.raises((TypeError, ValueError), match=name):
        M.moe_topk_gate_forward(**kw, out=outs)
    if out:
        assert bool((outs[0] == -7).all()) and bool((outs[1] == -7.0).all())
