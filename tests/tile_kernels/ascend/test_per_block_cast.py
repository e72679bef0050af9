"""tile_kernels.ascend.block_cast.per_block_cast on the Ascend twin, the Ascend-only form: int16 packed UE8M0
scales (column-major), bit-exact against the reference's FP32 scales packed, tiles spanning several cores
in both dimensions. The FP32 scale forms and per_channel_cast run on every backend in
tests/tile_kernels/quant/test_per_block_cast.py (test_variants) and test_per_channel_cast.py."""
import torch

from tile_kernels.ascend import block_cast
from tile_kernels.reference import cast as ref
from tile_kernels.testing.numeric import assert_equal

from .conftest import ascend_packed_ue8m0


def test_packed_ue8m0_scales():
    x = torch.randn(150, 576) * 3
    q, sf = block_cast.per_block_cast(x, "e4m3", (32, 32), use_tma_aligned_col_major_sf=True, round_sf=True,
                                      use_packed_ue8m0=True)
    q_ref, sf_ref = ref.cast(x, "e4m3", (32, 32), round_sf=True)
    assert_equal(q, q_ref)
    assert_equal(sf, ascend_packed_ue8m0(sf_ref))
