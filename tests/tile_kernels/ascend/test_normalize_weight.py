"""tile_kernels.ascend.routing.normalize_weight on the Ascend twin: bit-exact against the reference's
sequential FP32 sum from 1e-20 and division, at ragged token counts (several cores), zero rows included."""
import torch

from tile_kernels.ascend import routing
from tile_kernels.reference import moe as ref
from tile_kernels.testing.numeric import assert_equal


def test_matches_reference():
    w = torch.rand(601, 9) * torch.logspace(-20, 4, 9)
    w[0] = 0.0
    den, out = routing.normalize_weight(w)
    den_ref, out_ref = ref.normalize_weight(w)
    assert_equal(den, den_ref)
    assert_equal(out, out_ref)
