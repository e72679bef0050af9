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


@pytest.mark.parametrize("backend", ["ascend", "host", "reference"])
def test_public_cast_back_takes_the_ascend_int16_scales(monkeypatch, backend):
    """What per_token_cast(use_packed_ue8m0=True) returns on Ascend (int16 pairs) goes back through the public
    per_token_cast_back on every backend (the host kernel reads int32 words: int16 goes to the reference)."""
    import tile_kernels
    from tile_kernels import _dispatch
    x = torch.randn(37, 320) * 3
    monkeypatch.setenv("TK_BACKEND", "ascend")
    q, sf = tile_kernels.quant.per_token_cast(x, "e4m3", 32, use_tma_aligned_col_major_sf=True, round_sf=True,
                                            use_packed_ue8m0=True)
    assert sf.dtype == torch.int16 and sf.shape == (37, 5)
    monkeypatch.setenv("TK_BACKEND", backend)
    assert _dispatch.TABLE.serves("cast_back", q.device, (q, sf), "bf16", (1, 32)) == \
        ("reference" if backend == "host" else backend)
    back = tile_kernels.quant.per_token_cast_back((q, sf), "bf16", 32)
    q_ref, sf_ref = ref.cast(x, "e4m3", (1, 32), round_sf=True)
    assert_equal(back, ref.cast_back((q_ref, sf_ref), "bf16", (1, 32)))


def test_public_cast_back_checks_int16_scale_shape():
    import tile_kernels
    q = torch.zeros(4, 320, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"x\[1\].*\(4, 5\)"):
        tile_kernels.quant.per_token_cast_back((q, torch.zeros(4, 3, dtype=torch.int16)), "bf16", 32)


def test_tiles_past_ub_go_to_the_reference(monkeypatch):
    """int32-packed (128, 128) scales: a core's smallest tile is 128 x 512 (one scale word of K-blocks), whose
    FP32 output alone overflows UB. The table sends that form (and a re-quantisation reading it) to the
    reference; the BF16 output fits and stays on the kernel."""
    import tile_kernels
    from tile_kernels import _dispatch
    monkeypatch.setenv("TK_BACKEND", "ascend")
    x = ref.cast(torch.randn(150, 512), "e4m3", (128, 128), round_sf=True, use_tma_aligned_col_major_sf=True,
                 use_packed_ue8m0=True)
    assert _dispatch.TABLE.serves("cast_back", x[0].device, x, "fp32", (128, 128)) == "reference"
    assert _dispatch.TABLE.serves("cast_back", x[0].device, x, "bf16", (128, 128)) == "ascend"
    assert _dispatch.TABLE.serves("per_token_cast", x[0].device, "quant", x, "e4m3", (1, 128), (128, 128), False,
                                  False, False, None, False, None) == "reference"
    assert_equal(tile_kernels.quant.cast_back(x, "fp32", (128, 128)), ref.cast_back(x, "fp32", (128, 128)))
