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


@pytest.mark.backends("host", "reference", why="the Ascend kernel runs these forms in "
                      "tests/tile_kernels/ascend/test_swiglu_backward_cast.py, its single fused launch asserted")
@pytest.mark.parametrize("g_dtype,three_d", [(torch.float32, False), (torch.bfloat16, True)])
def test_fp32_grad_3d_inputs_and_a_nan_gradient(backend, g_dtype, three_d):
    """grad_out in FP32 or as (3, 7, H) with x (3, 7, 2H); a NaN gradient gives its blocks a NaN scale
    (the host kernel's vector block maximum dropped it once); -1 rows a zero gradient; 320 columns, two
    32-channel halves of x_grad."""
    hidden, npc = 320, 32
    g = torch.Generator().manual_seed(5)
    x = ref.cast(torch.randn(21, 2 * hidden, generator=g) * 2, "e4m3", (1, npc))
    grad = torch.randn(21, hidden, generator=g).to(g_dtype)
    grad[5, 300] = float("nan")
    w = torch.rand(9, 3, generator=g)
    p2tt = torch.randperm(27, generator=g)[:21].int()
    p2tt[[3, 4]] = -1
    t2p = torch.full((9, 3), -1, dtype=torch.int32)
    t2p.view(-1)[p2tt[p2tt >= 0].long()] = (p2tt >= 0).nonzero().flatten().int()
    qx, gx = ((x[0].view(3, 7, 2 * hidden), x[1]), grad.view(3, 7, hidden)) if three_d else (x, grad)
    out, (q, sf), x_grad, w_grad = tile_kernels.quant.swiglu_backward_and_per_token_cast(qx, gx, w, p2tt, t2p, npc)
    out_ref, x_grad_ref, w_grad_ref = ref.swiglu_backward(x, grad, w, p2tt, t2p, npc, None)
    q_ref, sf_ref = ref.cast(x_grad_ref, "e4m3", (1, npc))
    assert sf_ref[5].isnan().tolist() == ([False] * 9 + [True]) * 2  # da and db: the NaN-amax path is reached
    for got, want in ((out, out_ref.to(g_dtype)), (x_grad, x_grad_ref.to(g_dtype)), (q, q_ref), (sf, sf_ref)):
        assert_equal(got.reshape(want.shape), want)
    assert not x_grad_ref[3:5].any()
    torch.testing.assert_close(w_grad, w_grad_ref, atol=1e-4, rtol=1e-4, equal_nan=True)
