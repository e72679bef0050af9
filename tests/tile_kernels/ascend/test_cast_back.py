"""tile_kernels.ascend.cast_back.cast_back on the Ascend twin: bit-exact against the reference cast-back
for E4M3 and E2M1 data, FP32 row/column-major, Ascend int16 and NVIDIA int32 packed UE8M0 scales,
BF16 and FP32 outputs, at ragged sizes."""
import pytest
import torch

from tile_kernels.ascend import cast_back
from tile_kernels.reference import cast as ref
from tile_kernels.testing.numeric import assert_equal

from .conftest import ascend_packed_ue8m0, unpack_ascend_ue8m0

CASES = [  # fmt, block, layout, out
    ("e4m3", (1, 128), "row", "bf16"),
    ("e4m3", (1, 32), "ascend_ue8m0", "fp32"),
    ("e2m1", (1, 32), "col", "fp32"),
    ("e4m3", (128, 128), "int32_ue8m0", "bf16"),
    ("e4m3", (128, 1), "row", "fp32"),
]


@pytest.mark.parametrize("fmt,block,layout,out", CASES)
def test_matches_reference(fmt, block, layout, out):
    x = torch.randn(150, 576) * 3
    packed = layout.endswith("ue8m0")
    q, sf = ref.cast(x, fmt, block, round_sf=packed, use_tma_aligned_col_major_sf=layout != "row",
                     use_packed_ue8m0=layout == "int32_ue8m0")
    if layout == "ascend_ue8m0":
        sf = ascend_packed_ue8m0(ref.cast(x, fmt, block, round_sf=True)[1])
        sf_ref = unpack_ascend_ue8m0(sf)
    else:
        sf_ref = sf
    y = cast_back.cast_back((q, sf), out, block)
    assert_equal(y, ref.cast_back((q, sf_ref), out, block))
