"""tile_kernels.ascend.block_cast.per_token_cast on the Ascend twin, the Ascend-only form: int16 packed UE8M0
scales, bit-exact against the reference's FP32 scales packed; and (data, sf) inputs with (1, 128) blocks
re-quantised. The FP32 scale forms and the empty input run on every backend in
tests/tile_kernels/quant/test_per_token_cast.py (test_forms, test_empty_input)."""
import pytest
import torch

from tile_kernels.ascend import block_cast
from tile_kernels.reference import cast as ref
from tile_kernels.testing.numeric import assert_equal

from .conftest import ascend_packed_ue8m0
from .inputs import PER_TOKEN_CASES, cast_input


@pytest.mark.parametrize("dtype,fmt,npc,col,round_sf,packed", [c for c in PER_TOKEN_CASES if c[-1]])
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

