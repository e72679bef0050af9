"""cast_back / per_token_cast_back: bit-exact against the reference dequantisation, and close to
the original data. The cases taking ``backend`` run on every backend; the Ascend twin runs each form once
(the Ascend int16 scales and the forms left to the reference: tests/tile_kernels/ascend/test_cast_back.py)."""
import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.testing.numeric import assert_equal, calc_diff

from .._twin import twin_subset

LAYOUTS = [(False, False, False), (True, True, True)]


@pytest.mark.parametrize("fmt,npc,out,col,round_sf,packed", twin_subset(
    [(f, n, o, *lay) for f in ("e4m3", "e2m1") for n in (128, "H") for o in ("fp32", "bf16") for lay in LAYOUTS],
    [("e4m3", 128, "fp32", *LAYOUTS[0]), ("e2m1", "H", "bf16", *LAYOUTS[1])],
    why="the twin runs the two cases that take each form once"))
def test_per_token_round_trip(backend, fmt, npc, out, col, round_sf, packed):
    x = torch.randn(77, 640, dtype=torch.bfloat16)
    npc = 640 if npc == "H" else npc
    q, sf = tile_kernels.quant.per_token_cast(x, fmt, npc, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                              use_packed_ue8m0=packed)
    back = tile_kernels.quant.per_token_cast_back((q, sf), out, npc)
    assert_equal(back, ref.cast_back((q, sf), out, (1, npc)))
    assert calc_diff(x.float(), back.float()) < (2e-2 if fmt == "e2m1" else 1e-3)


# FP4 packs two columns per byte, so per-column (128, 1) scales exist only for E4M3.
BLOCK_FORMS = [("e4m3", (128, 1)), ("e4m3", (128, 128)), ("e4m3", (32, 32)), ("e2m1", (128, 128)), ("e2m1", (32, 32))]


@pytest.mark.parametrize("fmt,block,round_sf", twin_subset(
    [(*f, r) for r in (False, True) for f in BLOCK_FORMS], [(*f, i % 2 == 1) for i, f in enumerate(BLOCK_FORMS)],
    why="the twin runs each block form once, round_sf alternating"))
def test_block_scales(backend, block, round_sf, fmt):
    x = torch.randn(200, 256)
    q, sf = ref.cast(x, fmt, block, round_sf=round_sf)
    for out in ("fp32", "bf16"):
        assert_equal(tile_kernels.quant.cast_back((q, sf), out, block), ref.cast_back((q, sf), out, block))


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("out", ["bf16", "fp32"])
def test_every_code_and_extreme_scales(host, fmt, out):
    """All 256 data bytes (E4M3 NaN codes included) under scales that keep the products normal,
    make them FP32-subnormal, zero, or large: the kernel's hardware BF16 path must agree with the
    reference wherever it is taken and step aside where it would flush or mishandle NaN."""
    scales = [1.0, 3.1e-3, 2.0 ** -117, 2.0 ** -118, 2.0 ** -130, 0.0, 2.0 ** 119, 2.0 ** 121, -0.75]
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(len(scales), 2)  # (rows, 512) bytes
    if fmt == "e4m3":
        data = codes.view(torch.float8_e4m3fn)
    else:
        data = codes.view(torch.int8)
    hidden = data.shape[1] * (2 if fmt == "e2m1" else 1)
    sf = torch.tensor(scales, dtype=torch.float32).unsqueeze(1).repeat(1, hidden // 128)
    got = tile_kernels.quant.per_token_cast_back((data, sf), out, 128)
    assert_equal(got, ref.cast_back((data, sf), out, (1, 128)))
