"""tile_kernels.ascend.expand.expand_to_fused on the Ascend twin: bit-exact against the reference
expansion (BF16 and E4M3 rows, -1 slots, rows no slot maps to stay zero) at ragged sizes."""
import pytest
import torch

from tile_kernels.ascend import expand
from tile_kernels.reference import moe as ref
from tile_kernels.testing.numeric import assert_equal

from .inputs import fused_positions


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_matches_reference(dtype):
    tokens, k, hidden, num_rows = 37, 3, 96, 126  # test_expand_to_fused_with_sf's shape: shared lowerings
    pos = fused_positions(tokens, k, num_rows)
    x = torch.randn(tokens, hidden).to(dtype)
    pos_to_expert = torch.zeros(num_rows, dtype=torch.int32)
    got = expand.expand_to_fused(x, pos, pos_to_expert)
    want = ref.expand_to_fused(x.view(torch.uint8), pos, pos_to_expert).view(dtype)
    assert_equal(got, want)
