"""SwiGLU forward fused with the per-channel cast (transposed or not), against reference swiglu + cast, on
every backend; the Ascend twin runs the cases that take each form once. The Ascend kernel's NaN/Inf and
tails are in tests/tile_kernels/ascend/test_transpose.py."""
import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.testing.numeric import assert_equal

from .._twin import product, twin_subset


@pytest.mark.parametrize("npt,clamp,without_transpose", twin_subset(
    product([32, 128], [None, 0.5], [False, True]), [(32, None, False), (128, 0.5, True)],
    why="the twin runs the two cases that take each form once"))
def test_swiglu_per_channel(backend, npt, clamp, without_transpose):
    x = (torch.randn(256, 512) * 3).bfloat16()
    q, sf = tile_kernels.quant.swiglu_forward_and_per_channel_cast_and_transpose(
        x, "e4m3", npt, round_sf=True, without_transpose=without_transpose, swiglu_clamp_value=clamp)
    y = ref.swiglu_forward(x, swiglu_clamp_value=clamp).bfloat16()
    q_ref, sf_ref = ref.cast(y, "e4m3", (npt, 1), round_sf=True)
    assert_equal(q, q_ref if without_transpose else q_ref.T.contiguous())
    assert_equal(sf, sf_ref)
