"""cast_back / per_token_cast_back: bit-exact against the reference dequantisation, and close to
the original data."""
import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.testing.numeric import assert_equal, calc_diff


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("npc", [128, "H"])
@pytest.mark.parametrize("out", ["fp32", "bf16"])
@pytest.mark.parametrize("col,round_sf,packed", [(False, False, False), (True, True, True)])
def test_per_token_round_trip(backend, fmt, npc, out, col, round_sf, packed):
    x = torch.randn(77, 640, dtype=torch.bfloat16)
    npc = 640 if npc == "H" else npc
    q, sf = tile_kernels.quant.per_token_cast(x, fmt, npc, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                              use_packed_ue8m0=packed)
    back = tile_kernels.quant.per_token_cast_back((q, sf), out, npc)
    assert_equal(back, ref.cast_back((q, sf), out, (1, npc)))
    assert calc_diff(x.float(), back.float()) < (2e-2 if fmt == "e2m1" else 1e-3)


# FP4 packs two columns per byte, so per-column (128, 1) scales exist only for E4M3.
@pytest.mark.parametrize("fmt,block", [("e4m3", (128, 1)), ("e4m3", (128, 128)), ("e4m3", (32, 32)),
                                       ("e2m1", (128, 128)), ("e2m1", (32, 32))])
@pytest.mark.parametrize("round_sf", [False, True])
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
