"""vLLM's call forms: the DeepSeek-V4 attention output projection (``deepseek_v4_fp8_einsum`` passes the
linear layer's 2-D ``wo_a`` weight straight to ``deep_gemm.fp8_einsum``) and the DeepSeek-V4.1
``TileKernelsRouter`` (``tile_kernels.moe.moe_topk_gate_forward`` with vLLM's keywords)."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8
from tests.clients.conftest import dequant_blocks, dequant_rows


def test_o_proj_fp8_einsum_with_2d_wo_a_weight():
    tokens, groups, out_rank, hidden = 5, 2, 256, 384      # o [N, G, hidden] -> z [N, G, out_rank]
    o = torch.randn(tokens, groups, hidden)
    wo_a = torch.randn(groups * out_rank, hidden)          # a Linear's [G*R, K] weight, as vLLM loads it
    w_fp8, w_scale = per_block_cast_to_fp8(wo_a, use_ue8m0=False)
    o_fp8, o_scale = per_token_cast_to_fp8(o.view(-1, hidden), use_ue8m0=False)
    o_fp8, o_scale = o_fp8.view(tokens, groups, hidden), o_scale.view(tokens, groups, -1)
    z = torch.empty(tokens, groups, out_rank, dtype=torch.bfloat16)
    deep_gemm.fp8_einsum("bhr,hdr->bhd", (o_fp8, o_scale), (w_fp8, w_scale), z, recipe=(1, 128, 128))
    a = dequant_rows(o_fp8, o_scale, 128)
    w = dequant_blocks(w_fp8, w_scale, 128).view(groups, out_rank, hidden)
    expected = torch.einsum("bhr,hdr->bhd", a, w)
    assert calc_diff(z, expected) < 1e-4


def test_o_proj_2d_weight_must_split_into_heads():
    o_fp8 = torch.zeros(2, 3, 128, dtype=torch.float8_e4m3fn)
    w_fp8 = torch.zeros(256, 128, dtype=torch.float8_e4m3fn)   # 256 rows do not split into 3 heads
    with pytest.raises(ValueError, match="b\\[0\\].*divisible by the 3 heads"):
        deep_gemm.fp8_einsum("bhr,hdr->bhd", (o_fp8, torch.ones(2, 3, 1)), (w_fp8, torch.ones(2, 1)),
                             torch.empty(2, 3, 85, dtype=torch.bfloat16))


def _v41_routing(logits, bias, top_k, scale, image_bias=None, image_mask=None):
    """DeepSeek-V4.1 routing as vLLM's router documents it, written here independently."""
    score = torch.sqrt(torch.where(logits > 20, logits, torch.log1p(torch.exp(logits))))
    rank_bias = bias.expand_as(score) if image_mask is None else torch.where(image_mask[:, None], image_bias, bias)
    ids = torch.topk(score + rank_bias, top_k, dim=1).indices
    chosen = score.gather(1, ids)
    return ids, chosen / (chosen.sum(1, keepdim=True) + 1e-20) * scale


@pytest.mark.parametrize("with_images", [False, True])
def test_tile_kernels_router_call(with_images):
    from tile_kernels.moe import moe_topk_gate_forward
    rows, experts, top_k, scale = 9, 128, 3, 1.5
    logits = torch.randn(rows, experts) * 3
    bias = torch.randn(experts) * 0.1
    is_padding = torch.zeros(rows + 4, dtype=torch.bool)
    is_padding[-6:] = True                                   # the CUDA graph's padded batch
    route_mask = (~is_padding)[:rows]
    image_bias = torch.randn(experts) * 0.1 if with_images else None
    image_mask = (torch.arange(rows) % 3 == 0) if with_images else None
    topk_ids, topk_weights = moe_topk_gate_forward(
        logits, top_k, use_shared_as_routed=False, num_shared_experts=0, routed_scaling_factor=scale, ep_rank=0,
        mask=route_mask, bias=bias, image_bias=image_bias, image_token_mask=image_mask)
    assert topk_ids.dtype == torch.int64 and topk_weights.dtype == torch.float32
    ids, weights = _v41_routing(logits, bias, top_k, scale, image_bias, image_mask)
    routed = route_mask.nonzero().flatten()
    assert torch.equal(topk_ids[routed], ids[routed])
    torch.testing.assert_close(topk_weights[routed], weights[routed], rtol=1e-6, atol=1e-6)
    assert (topk_ids[~route_mask] == -1).all() and (topk_weights[~route_mask] == 0).all()


def test_tile_kernels_router_refuses_non_finite_logits():
    from tile_kernels.moe import moe_topk_gate_forward
    logits = torch.randn(4, 64)
    logits[2, 5] = float("nan")
    with pytest.raises(ValueError, match="logits"):
        moe_topk_gate_forward(logits, 2, False, 0, 1.0, 0, bias=torch.zeros(64))
    mask = torch.tensor([True, True, False, True])           # a padded row is not routed, so not checked
    ids, _ = moe_topk_gate_forward(logits, 2, False, 0, 1.0, 0, mask=mask, bias=torch.zeros(64))
    assert (ids[2] == -1).all()


def test_tile_kernels_router_shared_slots_and_replicas():
    """Upstream's full form: shared experts routed as slots of weight 1, mapped to physical replicas."""
    from tile_kernels.moe import moe_topk_gate_forward
    rows, experts, top_k, shared, ep_rank = 6, 32, 4, 1, 3
    logits = torch.randn(rows, experts)
    count = torch.randint(1, 3, (experts + shared,), dtype=torch.int32)
    phys = torch.arange((experts + shared) * 2, dtype=torch.int32).view(experts + shared, 2) + 1000
    unmapped = torch.empty(rows, top_k, dtype=torch.int64)
    ids, weights = moe_topk_gate_forward(logits, top_k, True, shared, 2.0, ep_rank, to_physical_map=phys,
                                         logical_count=count, unmapped_topk_idx=unmapped)
    logical, routed_weights = _v41_routing(logits, torch.zeros(experts), top_k, 2.0)
    assert torch.equal(unmapped, logical)
    torch.testing.assert_close(weights[:, :top_k], routed_weights, rtol=1e-6, atol=1e-6)
    assert (weights[:, top_k:] == 1).all()
    full = torch.cat([logical, torch.full((rows, 1), experts)], 1)
    replica = (ep_rank + torch.arange(rows)[:, None] * 23333) % count.long()[full]
    assert torch.equal(ids, phys.long()[full, replica])
