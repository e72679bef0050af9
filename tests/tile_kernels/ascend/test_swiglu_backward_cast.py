"""swiglu_backward_and_per_token_cast on the Ascend twin (the SwiGLU backward kernel, then the cast
kernel), through the public op with TK_BACKEND=ascend: out, x_grad and its E4M3 cast bit-exact against the
reference backward and cast, weight_grad within upstream's tolerance (its row sum's order is torch's), at
ragged row counts, BF16/FP32 grad_out, -1 rows, the clamp, 32- and 128-channel scales, 3-D inputs."""
import pytest
import torch

import tile_kernels
from tile_kernels import _lib
from tile_kernels.reference import cast as ref_cast
from tile_kernels.reference import swiglu as ref
from tile_kernels.testing.numeric import assert_equal

from .inputs import swiglu_backward_inputs


@pytest.mark.parametrize("g_dtype,h,npc,round_sf,clamp,three_d", [
    (torch.bfloat16, 256, 128, True, None, False),
    (torch.float32, 320, 32, False, 0.5, False),  # two column chunks, the last ragged
    (torch.bfloat16, 128, 32, True, 2.0, True),
])
def test_matches_reference(monkeypatch, g_dtype, h, npc, round_sf, clamp, three_d):
    monkeypatch.setenv("TK_BACKEND", "ascend")
    (q, sf), grad, w, p2tt, t2p = swiglu_backward_inputs(g_dtype, h, npc, seed=h + npc)
    qx, gx = (q.view(3, 7, 2 * h), grad.view(3, 7, h)) if three_d else (q, grad)
    assert _lib.TABLE.serves("swiglu_backward_and_per_token_cast", q.device, qx, sf, gx, w, p2tt, t2p, npc,
                             round_sf, clamp) == "ascend"
    out, (xq, xsf), xg, wg = tile_kernels.quant.swiglu_backward_and_per_token_cast(
        (qx, sf), gx, w, p2tt, t2p, npc, round_sf=round_sf, swiglu_clamp_value=clamp)
    out_r, xg_r, wg_r = ref.swiglu_backward((q, sf), grad, w, p2tt, t2p, npc, clamp)
    xq_r, xsf_r = ref_cast.cast(xg_r, "e4m3", (1, npc), round_sf=round_sf)
    assert_equal(out, out_r.to(g_dtype))
    assert_equal(xg, xg_r.to(g_dtype))
    assert_equal(xq, xq_r)
    assert_equal(xsf, xsf_r)
    assert wg.dtype == torch.float32 and wg.shape == w.shape
    torch.testing.assert_close(wg, wg_r, atol=1e-4, rtol=1e-4)
