"""The MoE layer against the FP32 reference written from the math (tests/deepseek_layers/references.py):
without a group, on one-rank groups and expert-parallel over two gloo ranks."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import deep_gemm
from deepseek_layers.moe import MoE, MoEConfig, MoEWeights
from tests.deepseek_layers import references as ref
from tests.testkit.distributed import run_ranks
from tests.testkit.numerics import assert_bitwise_equal, calc_diff, randn

# Upstream's bound for one FP8 GEMM (1x128 activations, 128x128 weights) against the BF16 inputs is
# calc_diff < 1e-3. The layer chains two such GEMMs with an FP8-cast activation in between (four
# quantised operands instead of two), so the bound doubles plus margin; measured ~2e-3 at these shapes.
# A wrong expert, weight or scaling factor gives calc_diff > 1e-2.
MOE_TOLERANCE = 3e-3

GROUPED = MoEConfig(hidden=256, moe_inter_dim=128, n_routed_experts=16, n_activated_experts=4, n_expert_groups=4,
                    n_limited_groups=2, n_shared_experts=1, route_scale=2.5)
PLAIN = MoEConfig(hidden=512, moe_inter_dim=256, n_routed_experts=8, n_activated_experts=2, score_func="softmax")


def _check_against_reference(layer: MoE, cfg: MoEConfig, w: MoEWeights, x: torch.Tensor) -> torch.Tensor:
    out = layer(x)
    expected, expected_idx = ref.moe(x, cfg, w)
    idx, _ = layer.route(x)
    # the router works in FP32 on both sides; the same experts must win (order inside a row is free)
    assert torch.equal(idx.sort(1).values, expected_idx.sort(1).values)
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    diff = calc_diff(out, expected)
    assert diff < MOE_TOLERANCE, diff
    return out


@pytest.mark.parametrize("cfg", [
    GROUPED,
    PLAIN,
    MoEConfig(hidden=256, moe_inter_dim=128, n_routed_experts=32, n_activated_experts=6, n_expert_groups=8,
              n_limited_groups=3, n_shared_experts=2, score_func="sqrtsoftplus"),
], ids=["sigmoid-grouped-shared", "softmax-plain", "sqrtsoftplus-2shared"])
def test_local_layer_matches_reference(cfg):
    w = MoEWeights.random(cfg, seed=1)
    _check_against_reference(MoE(cfg, w), cfg, w, randn(80, cfg.hidden, seed=2).bfloat16())


def test_route_scale_and_shared_expert_enter_the_output():
    w = MoEWeights.random(GROUPED, seed=3)
    x = randn(32, GROUPED.hidden, seed=4).bfloat16()
    base = MoE(GROUPED, w)(x).float()
    no_shared = MoEConfig(**{**GROUPED.__dict__, "n_shared_experts": 0})
    routed = MoE(no_shared, MoEWeights(w.gate, w.gate_bias, w.w13, w.w2))(x).float()
    shared = ref.swiglu_ffn(x, w.shared_w13, w.shared_w2)
    assert calc_diff(base - routed, shared) < MOE_TOLERANCE
    doubled = MoEConfig(**{**no_shared.__dict__, "route_scale": 5.0})
    twice = MoE(doubled, MoEWeights(w.gate, w.gate_bias, w.w13, w.w2))(x).float()
    assert calc_diff(twice, 2 * routed) < 1e-5


def test_no_tokens():
    w = MoEWeights.random(GROUPED, seed=5)
    out = MoE(GROUPED, w)(torch.empty(0, GROUPED.hidden, dtype=torch.bfloat16))
    assert out.shape == (0, GROUPED.hidden)


def _ep_rank(rank: int, world: int, num_tokens: list[int]):
    w = MoEWeights.random(GROUPED, seed=7)
    x = randn(num_tokens[rank], GROUPED.hidden, seed=10 + rank).bfloat16()
    local = MoE(GROUPED, w)(x)
    # one rank alone: a one-rank group per rank (every rank creates every group, in one order)
    alone = [dist.new_group([r], backend="gloo") for r in range(world)][rank]
    layer = MoE(GROUPED, w, group=alone, num_max_tokens_per_rank=64)
    try:
        assert layer.num_local_experts == GROUPED.n_routed_experts
        out = _check_against_reference(layer, GROUPED, w, x)
    finally:
        layer.destroy()
    # The local path (tile_kernels' fused layout, no communication) computes the same rows, sums each
    # token's experts in FP32 in top-k order, rounds to BF16 once and adds the shared expert in FP32:
    # deep_ep's combine does the same on one rank, so the two agree bit for bit there.
    assert_bitwise_equal(out, local, "one-rank EP output vs local output")
    # expert parallel over the whole group
    layer = MoE(GROUPED, w, group=dist.group.WORLD, num_max_tokens_per_rank=64)
    try:
        assert layer.num_local_experts == GROUPED.n_routed_experts // world
        out = _check_against_reference(layer, GROUPED, w, x)
        again = layer(x)  # the buffer is reused across calls
        # DeepGEMM-Ascend's psum form (counts) places the groups as the end rows do: the same bits
        deep_gemm.set_psum_layout_form("counts")
        try:
            counts_form, local_counts_form = layer(x), MoE(GROUPED, w)(x)
        finally:
            deep_gemm.set_psum_layout_form("end_rows")
    finally:
        layer.destroy()
    assert_bitwise_equal(again, out, "second call")
    assert_bitwise_equal(counts_form, out, "EP output with the counts psum form")
    assert_bitwise_equal(local_counts_form, local, "local output with the counts psum form")
    assert calc_diff(out, local) < 1e-5
    # no shared expert (combine without bias), and the last rank sends no tokens but still serves experts
    w = MoEWeights.random(PLAIN, seed=8)
    x = randn(0 if rank == world - 1 else 24, PLAIN.hidden, seed=30 + rank).bfloat16()
    layer = MoE(PLAIN, w, group=dist.group.WORLD, num_max_tokens_per_rank=32)
    try:
        if x.shape[0]:
            _check_against_reference(layer, PLAIN, w, x)
        else:
            assert layer(x).shape == x.shape
    finally:
        layer.destroy()
    return out.shape[0]


def test_one_rank_groups_and_two_ranks_expert_parallel():
    # ragged token counts; each rank's tokens reach experts on both ranks
    assert run_ranks(_ep_rank, 2, [48, 33], timeout=120) == [48, 33]


# ---- bad input ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def layer():
    return MoE(GROUPED, MoEWeights.random(GROUPED, seed=0))


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
       shape=st.lists(st.integers(0, 300), min_size=1, max_size=3))
def test_bad_input_is_refused(layer, dtype, shape):
    x = torch.zeros(*shape, dtype=dtype)
    if dtype == torch.bfloat16 and len(shape) == 2 and shape[1] == GROUPED.hidden:
        assert layer(x).shape == x.shape
        return
    with pytest.raises((TypeError, ValueError), match="x: expected"):
        layer(x)


def test_bad_config_and_weights():
    w = MoEWeights.random(GROUPED)
    with pytest.raises(ValueError, match="hidden"):
        MoE(MoEConfig(**{**GROUPED.__dict__, "hidden": 320}), w)
    with pytest.raises(ValueError, match="weights.w2"):
        MoE(GROUPED, MoEWeights(w.gate, w.gate_bias, w.w13, w.w2[:, :, :64], w.shared_w13, w.shared_w2))
    with pytest.raises(TypeError, match="weights.gate"):
        MoE(GROUPED, MoEWeights(None, w.gate_bias, w.w13, w.w2, w.shared_w13, w.shared_w2))
    with pytest.raises(ValueError, match="num_topk|n_activated"):
        MoE(MoEConfig(**{**GROUPED.__dict__, "n_activated_experts": 0}), w)
    with pytest.raises(ValueError, match="^weights.shared_w13: expected None when cfg.n_shared_experts is 0, "
                                         "got a tensor$"):
        MoE(MoEConfig(**{**GROUPED.__dict__, "n_shared_experts": 0}), w)


def test_input_on_another_device_is_refused(layer):
    # named by the layer, not by the first library op it would reach (deep_gemm's `a`)
    with pytest.raises(ValueError, match=r"x: expected device cpu \(the device of the layer's weights\), got meta"):
        layer(torch.empty(4, GROUPED.hidden, dtype=torch.bfloat16, device="meta"))
