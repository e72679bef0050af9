"""tile_kernels.ascend.block_cast.per_token_cast on the Ascend twin: bit-exact against the reference cast
with block (1, num_per_channels) at ragged sizes, every scale layout (FP32 row/column-major, int16
packed UE8M0), E4M3 and E2M1, and (data, sf) inputs re-quantised."""
import pytest
import torch

from tile_kernels.ascend import block_cast
from tile_kernels.reference import cast as ref
from tile_kernels.testing.numeric import assert_equal

from .conftest import ascend_packed_ue8m0
from .inputs import PER_TOKEN_CASES, cast_input


@pytest.mark.parametrize("dtype,fmt,npc,col,round_sf,packed", PER_TOKEN_CASES)
def test_matches_reference(dtype, fmt, npc, col, round_sf, packed):
    x = cast_input(dtype)
    q, sf = block_cast.per_token_cast(x, fmt, npc, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                      use_packed_ue8m0=packed)
    q_ref, sf_ref = ref.cast(x, fmt, (1, npc), round_sf=round_sf, use_tma_aligned_col_major_sf=col and not packed)
    assert_equal(q, q_ref)
    assert_equal(sf, ascend_packed_ue8m0(sf_ref) if packed else sf_ref)


def test_quant_tensor_input_is_requantised():
    x = ref.cast(torch.randn(37, 576), "e4m3", (1, 128), round_sf=True)
    q, sf = block_cast.per_token_cast(x, "e4m3", 128, x_block_size=(1, 128))
    q_ref, sf_ref = ref.cast(x, "e4m3", (1, 128), x_block_size=(1, 128))
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)


def test_empty_input_launches_nothing():
    q, sf = block_cast.per_token_cast(torch.empty(0, 576), "e4m3", 128)
    assert q.shape == (0, 576) and sf.shape == (0, 5)
