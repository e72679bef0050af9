"""tile_kernels.ascend.block_cast.per_block_cast and per_channel_cast on the Ascend twin: bit-exact against
the reference cast with (bm, bk) and (num_per_tokens, 1) blocks at ragged sizes, tiles spanning several
cores in both dimensions."""
import pytest
import torch

from tile_kernels.ascend import block_cast
from tile_kernels.reference import cast as ref
from tile_kernels.testing.numeric import assert_equal

from .conftest import ascend_packed_ue8m0


@pytest.mark.parametrize("block,col,round_sf,packed", [((128, 128), False, False, False),
                                                       ((32, 32), True, True, True)])
def test_per_block_matches_reference(block, col, round_sf, packed):
    x = torch.randn(150, 576) * 3
    q, sf = block_cast.per_block_cast(x, "e4m3", block, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                      use_packed_ue8m0=packed)
    q_ref, sf_ref = ref.cast(x, "e4m3", block, round_sf=round_sf, use_tma_aligned_col_major_sf=col and not packed)
    assert_equal(q, q_ref)
    assert_equal(sf, ascend_packed_ue8m0(sf_ref) if packed else sf_ref)


@pytest.mark.parametrize("round_sf", [False, True])
def test_per_channel_matches_reference(round_sf):
    x = torch.randn(256, 192) * 3
    q, sf = block_cast.per_channel_cast(x, "e4m3", 128, round_sf=round_sf)
    q_ref, sf_ref = ref.cast(x, "e4m3", (128, 1), round_sf=round_sf)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)
