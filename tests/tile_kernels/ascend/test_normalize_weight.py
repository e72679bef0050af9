"""tile_kernels.ascend.routing.normalize_weight on the Ascend twin: bit-exact against the reference's
sequential FP32 sum from 1e-20 and division, at ragged token counts (several cores), zero rows included."""

from tile_kernels.ascend import routing
from tile_kernels.reference import moe as ref
from tile_kernels.testing.numeric import assert_equal

from .inputs import gate_weights


def test_matches_reference():
    w = gate_weights()
    den, out = routing.normalize_weight(w)
    den_ref, out_ref = ref.normalize_weight(w)
    assert_equal(den, den_ref)
    assert_equal(out, out_ref)
