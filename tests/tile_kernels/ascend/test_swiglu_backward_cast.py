"""swiglu_backward_and_per_token_cast on the Ascend twin (one kernel: the SwiGLU backward with the E4M3 cast
of x_grad fused), through the public op with TK_BACKEND=ascend: a single launch, of the backward kernel;
out, x_grad and its E4M3 cast bit-exact against the reference backward and cast, weight_grad within
upstream's tolerance (its row sum's order is torch's), at ragged row counts, BF16/FP32 grad_out, -1 rows
(zero gradient: the amax floor), the clamp, 32- and 128-channel scales over one or two column chunks (the
last ragged), a NaN gradient (its blocks' NaN scale), 3-D inputs. The npu-marked test runs two of the
cases on NPU tensors. Here, not in tests/tile_kernels/quant/, because each case asserts the kernel's single
fused launch (no cast kernel after the backward) and its column chunks; the op's contract runs on every
backend in tests/tile_kernels/quant/test_swiglu_backward_and_per_token_cast.py (these FP32, 3-D and NaN
forms there on host and reference)."""
import pytest
import torch

import tile_kernels
from tests.testkit.npu import DEVICE
from tile_kernels import _dispatch
from tile_kernels._lib import LIB
from tile_kernels.ascend import swiglu_backward
from tile_kernels.reference import cast as ref_cast
from tile_kernels.reference import swiglu as ref
from tile_kernels.testing.numeric import assert_equal

from .inputs import swiglu_backward_inputs

PARAMS = "g_dtype,h,npc,round_sf,clamp,three_d,nan"
CASES = [
    (torch.bfloat16, 256, 128, True, None, False, False),
    (torch.float32, 320, 32, False, 0.5, False, False),  # two column chunks, the last ragged (2 of 8 blocks)
    (torch.float32, 384, 128, True, None, False, True),  # two chunks, the last one block per half
    (torch.bfloat16, 128, 32, True, 2.0, True, False),
]


def _check(monkeypatch, device, g_dtype, h, npc, round_sf, clamp, three_d, nan):
    launched = []
    launch = LIB.run_tilelang
    monkeypatch.setattr(LIB, "run_tilelang", lambda builder, args, *t: (launched.append(builder), launch(builder, args, *t)))
    (q, sf), grad, w, p2tt, t2p = swiglu_backward_inputs(g_dtype, h, npc, seed=h + npc)
    if nan:
        grad[5, 300] = float("nan")  # NaN in da and db of row 5, both in the second chunk
    qx, gx = (q.view(3, 7, 2 * h), grad.view(3, 7, h)) if three_d else (q, grad)
    args = [t.to(device) for t in (qx, sf, gx, w, p2tt, t2p)]
    assert _dispatch.TABLE.serves("swiglu_backward_and_per_token_cast", args[0].device, *args, npc, round_sf,
                             clamp) == "ascend"
    qd, sfd, gd, wd, p2ttd, t2pd = args
    got = tile_kernels.quant.swiglu_backward_and_per_token_cast((qd, sfd), gd, wd, p2ttd, t2pd, npc,
                                                                round_sf=round_sf, swiglu_clamp_value=clamp)
    assert launched == [swiglu_backward.build]  # the cast is fused: no cast kernel launched after the backward
    out, xq, xsf, xg, wg = (t.cpu() for t in (got[0], *got[1], *got[2:]))
    out_r, xg_r, wg_r = ref.swiglu_backward((q, sf), grad, w, p2tt, t2p, npc, clamp)
    xq_r, xsf_r = ref_cast.cast(xg_r, "e4m3", (1, npc), round_sf=round_sf)
    if nan:
        # the case reaches the NaN-amax path: a NaN scale, rounded through its bits to 0 with round_sf
        assert ((xsf_r[5] == 0) if round_sf else xsf_r[5].isnan()).tolist() == [False] * 2 + [True] + [False] * 2 + [True]
    assert_equal(out, out_r.to(g_dtype))
    assert_equal(xg, xg_r.to(g_dtype))
    assert_equal(xq, xq_r)
    assert_equal(xsf, xsf_r)
    assert wg.dtype == torch.float32 and wg.shape == w.shape
    torch.testing.assert_close(wg, wg_r, atol=1e-4, rtol=1e-4, equal_nan=True)


@pytest.mark.parametrize(PARAMS, CASES)
def test_matches_reference(monkeypatch, g_dtype, h, npc, round_sf, clamp, three_d, nan):
    monkeypatch.setenv("TK_BACKEND", "ascend")
    _check(monkeypatch, "cpu", g_dtype, h, npc, round_sf, clamp, three_d, nan)


@pytest.mark.npu
@pytest.mark.parametrize(PARAMS, CASES[1:3])
def test_on_npu(monkeypatch, g_dtype, h, npc, round_sf, clamp, three_d, nan):
    _check(monkeypatch, DEVICE, g_dtype, h, npc, round_sf, clamp, three_d, nan)
