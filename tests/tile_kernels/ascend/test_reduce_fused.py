"""tile_kernels.ascend.reduce.reduce_fused on the Ascend twin: bit-exact against the reference (FP32 FMA
chain in k order, -1 slots skipped, cast to x's dtype), weighted BF16 and unweighted FP32, several cores."""
import pytest
import torch

from tile_kernels.ascend import reduce
from tile_kernels.reference import moe as ref
from tile_kernels.testing.numeric import assert_equal


@pytest.mark.parametrize("dtype,weighted", [(torch.bfloat16, True), (torch.float32, False)])
def test_matches_reference(dtype, weighted):
    tokens, k, hidden, num_rows = 37, 3, 96, 128
    pos = torch.randperm(num_rows)[:tokens * k].view(tokens, k).int()
    pos[0, 1] = -1
    pos[5] = -1  # a token with no slot reduces to zero
    x = torch.randn(num_rows, hidden).to(dtype)
    w = torch.rand(tokens, k) if weighted else None
    assert_equal(reduce.reduce_fused(x, w, pos), ref.reduce_fused(x, w, pos))


def test_scaled_inputs_are_left_to_other_backends():
    with pytest.raises(NotImplementedError, match="x_sf"):
        reduce.reduce_fused(torch.randn(8, 64), None, torch.zeros(4, 2, dtype=torch.int32), fp8_format="e4m3")
