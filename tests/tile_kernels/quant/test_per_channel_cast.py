"""Per-channel casts: plain, transposed, and fused with a re-scale and a row gather."""
import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.testing.generator import generate_topk_idx
from tile_kernels.testing.numeric import assert_equal, check_bias

from .._twin import twin_subset


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("round_sf", [False, True])
def test_per_channel_cast(backend, dtype, round_sf):
    x = torch.randn(256, 576).to(dtype)
    q, sf = tile_kernels.quant.per_channel_cast(x, "e4m3", 128, round_sf=round_sf)
    q_ref, sf_ref = ref.cast(x, "e4m3", (128, 1), round_sf=round_sf)
    assert sf.shape == (2, 576)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)
    check_bias(ref.cast_back((q, sf), "fp32", (128, 1)), x.float())


@pytest.mark.parametrize("npt", [32, 128])
@pytest.mark.parametrize("round_sf", [False, True])
def test_per_channel_cast_and_transpose(backend, npt, round_sf):
    x = torch.randn(256, 384, dtype=torch.bfloat16)
    q, sf = tile_kernels.quant.per_channel_cast_and_transpose(x, "e4m3", npt, round_sf=round_sf)
    q_ref, sf_ref = ref.cast(x, "e4m3", (npt, 1), round_sf=round_sf)
    assert_equal(q, q_ref.T.contiguous())
    assert_equal(sf, sf_ref)


@pytest.mark.parametrize("quant_input,expand,round_sf", twin_subset(
    [(q, e, r) for r in (False, True) for e in (False, True) for q in (False, True)],
    [(False, False, False), (True, True, True)], why="the twin runs the two cases that take each form once"))
def test_per_channel_cast_fused(backend, quant_input, expand, round_sf):
    tokens, hidden = 256, 512
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16)
    npc = None
    if quant_input:
        x = ref.cast(x, "e4m3", (1, 128))
        npc = 128
    pos_to_token = None
    if expand:
        topk_idx = generate_topk_idx({"num_send_tokens": tokens, "num_topk": 4, "num_experts": 4, "num_ep_ranks": 4})
        topk_idx = topk_idx[:tokens]
        pos_to_token = tile_kernels.moe.get_fused_mapping(topk_idx, 4, 0, 128)[1]
        if quant_input:
            x = (x[0][: topk_idx.shape[0]].contiguous(), x[1][: topk_idx.shape[0]].contiguous())
        else:
            x = x[: topk_idx.shape[0]].contiguous()
    q, sf = tile_kernels.quant.per_channel_cast_fused(x, "e4m3", 128, round_sf, npc, pos_to_token)
    assert backend != "ascend" or backend.served[-1:] == ["per_channel_cast_fused"]  # after get_fused_mapping
    q_ref, sf_ref = ref.per_channel_cast_fused(x, 128, npc, round_sf, pos_to_token)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)


def test_per_channel_cast_fused_no_positions(backend):
    """An empty pos_to_token: no rows out, the input's width kept (no launch on any backend)."""
    x = torch.randn(40, 256, dtype=torch.bfloat16)
    q, sf = tile_kernels.quant.per_channel_cast_fused(x, "e4m3", 128, pos_to_token=torch.zeros(0, dtype=torch.int32))
    assert q.shape == (0, 256) and q.dtype == torch.float8_e4m3fn
    assert sf.shape == (0, 256)
