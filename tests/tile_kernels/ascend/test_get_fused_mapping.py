"""tile_kernels.ascend.fused_mapping.get_fused_mapping on the Ascend twin: all eight outputs bit-exact
against the reference (positions ascending with the slot inside an expert, -1 padding, aligned segments)
at ragged sizes, with -1 slots, idle experts, more slots than one UB chunk, and the three sync modes. The
public op (served by the kernel, no tokens) runs on every backend in tests/tile_kernels/moe/test_fused_layout.py."""
import pytest

from tile_kernels.ascend import fused_mapping
from tile_kernels.reference import moe as ref
from tile_kernels.testing.numeric import assert_equal

from .inputs import routed_idx


def _check(got, want):
    for g, w in zip(got[:7], want[:7], strict=True):
        assert_equal(g, w)
    assert got[7] == want[7]


@pytest.mark.parametrize("tokens,k,experts,alignment,expanded,force", [
    (37, 6, 20, 4, 0, False),     # sync: maps cut to the used positions, counts listed
    (37, 6, 20, 4, 0, True),      # no sync: the worst-case length, no list
    (5, 2, 7, 1, 64, False),      # a given length
    (130, 5, 9, 16, 0, False),    # 650 slots: two UB chunks
])
def test_matches_reference(tokens, k, experts, alignment, expanded, force):
    idx = routed_idx(tokens, k, experts)
    _check(fused_mapping.get_fused_mapping(idx, experts, expanded, alignment, force),
           ref.get_fused_mapping(idx, experts, expanded, alignment, force))
