"""SwiGLU backward fused with the per-token cast of the input gradient, on every backend; the Ascend twin
runs the cases that take each form once (its kernel's forms: tests/tile_kernels/ascend/test_swiglu_backward_cast.py)."""
import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.testing.generator import generate_topk_idx
from tile_kernels.testing.numeric import assert_equal

from .._twin import product, twin_subset


@pytest.mark.parametrize("npc,clamp,round_sf", twin_subset(
    product([32, 128], [None, 1.0], [False, True]), [(32, None, False), (128, 1.0, True)],
    why="the twin runs the two cases that take each form once"))
def test_swiglu_backward(backend, npc, clamp, round_sf):
    hidden = 256
    idx = generate_topk_idx({"num_send_tokens": 40, "num_topk": 4, "num_experts": 6, "num_ep_ranks": 2})
    _, _, p2tt, t2p = tile_kernels.moe.get_fused_mapping(idx, 6, 0, 32)[:4]
    w = torch.rand(idx.shape, dtype=torch.float32)
    rows = p2tt.shape[0]
    x = ref.cast(torch.randn(rows, 2 * hidden) * 2, "e4m3", (1, npc))
    g = torch.randn(rows, hidden).bfloat16()
    out, (q, sf), x_grad, w_grad = tile_kernels.quant.swiglu_backward_and_per_token_cast(
        x, g, w, p2tt, t2p, npc, round_sf=round_sf, swiglu_clamp_value=clamp)
    out_ref, x_grad_ref, w_grad_ref = ref.swiglu_backward(x, g, w, p2tt, t2p, npc, clamp)
    assert_equal(out, out_ref.bfloat16())
    assert_equal(x_grad, x_grad_ref.bfloat16())
    q_ref, sf_ref = ref.cast(x_grad_ref, "e4m3", (1, npc), round_sf=round_sf)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)
    torch.testing.assert_close(w_grad, w_grad_ref, atol=1e-4, rtol=1e-4)
    assert float(w_grad.abs().sum()) > 0
