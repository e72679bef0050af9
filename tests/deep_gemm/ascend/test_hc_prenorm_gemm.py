"""deep_gemm's Ascend tf32_hc_prenorm_gemm (deep_gemm/ascend/hc_prenorm_gemm.*) on deepjit's Ascend twin,
through the public op with DG_BACKEND=ascend.

The cube rounds B to HF32 (10 mantissa bits, ties to even) as upstream's TF32 MMA rounds to TF32, and
upstream checks its kernel against a TF32 torch GEMM at calc_diff 1e-8; here the reference is the
FP32 product of A and HF32-rounded B, so the products agree up to summation order (assert_close), and
the squared sums (BF16 A squared in FP32) agree with the FP32 reference. Shapes: one M block with row,
column and K tails (7 x 5 x 37); two M blocks and two N blocks (130 x 70 x 300); the upstream form
N = 24 without splits; an empty split (K = 4 in 3 splits). The grid is cut to 3 blocks, so a block runs
several work items (of different splits) in turn. One compile serves all (run-time shapes)."""
import pytest
import torch

import deep_gemm
from deep_gemm import _dispatch
from deep_gemm.ascend import hc_prenorm_gemm as ascend_hc
from deep_gemm.testing import calc_diff
from deepjit.tilelang_route.conformance.atomics_sync import round_hf32

SENTINEL = -7.0


@pytest.mark.parametrize(("m", "n", "k", "num_splits"), [(7, 5, 37, 3), (130, 70, 300, 2), (13, 24, 640, None),
                                                          (1, 9, 4, 3)])
def test_hc_prenorm_gemm_matches_the_hf32_reference(monkeypatch, m, n, k, num_splits):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    monkeypatch.setattr(ascend_hc, "num_cube_cores", lambda _t: 3)
    a, b = torch.randn(m, k).bfloat16(), torch.randn(n, k)
    splits = num_splits or 1
    if num_splits is None:  # rows of d 8 elements apart: ldd != N
        buf = torch.full((m, n + 8), SENTINEL)
        d, sqr = buf[:, :n], torch.full((m,), SENTINEL)
    else:
        d, sqr = torch.full((splits, m, n), SENTINEL), torch.full((splits, m), SENTINEL)
    assert _dispatch.TABLE.serves("hc_prenorm_gemm", a.device, a, b, d, sqr, num_splits) == "ascend"
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr, num_splits=num_splits)
    af, bf = a.float(), round_hf32(b, False)
    chunk = -(-k // splits)
    d3, s2 = d.view(splits, m, n) if num_splits else d.unsqueeze(0), sqr.view(splits, m)
    for i in range(splits):
        s, e = min(k, i * chunk), min(k, (i + 1) * chunk)
        torch.testing.assert_close(d3[i], af[:, s:e] @ bf[:, s:e].t(), rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(s2[i], af[:, s:e].square().sum(-1), rtol=1e-5, atol=1e-4)
    assert calc_diff(d3.sum(0), af @ bf.t()) < 1e-8
    assert calc_diff(s2.sum(0), af.square().sum(-1)) < 1e-8
    if num_splits is None:
        assert torch.all(buf[:, n:] == SENTINEL), "d was written outside its [M, N] view"
