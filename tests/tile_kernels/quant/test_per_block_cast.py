"""per_block_cast (+ scale-only, precomputed): bit-exact against the reference with (bm, bk) blocks,
on row counts that leave partial blocks. test_variants runs on every backend (the Ascend kernel on the
twin included); the Ascend-only int16 packed scales are in tests/tile_kernels/ascend/test_per_block_cast.py."""
import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.testing.numeric import assert_equal, check_bias


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("block", [(128, 128), (32, 32), (32, 128)])
@pytest.mark.parametrize("col,round_sf,packed", [(False, False, False), (False, True, False), (True, True, True)])
def test_per_block_cast(host, dtype, fmt, block, col, round_sf, packed):
    x = torch.randn(150, 576).to(dtype)
    q, sf = tile_kernels.quant.per_block_cast(x, fmt, block, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                              use_packed_ue8m0=packed)
    q_ref, sf_ref = ref.cast(x, fmt, block, round_sf=round_sf, use_tma_aligned_col_major_sf=col,
                             use_packed_ue8m0=packed)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)
    if not packed:
        check_bias(ref.cast_back((q, sf), "fp32", block), x.float())


@pytest.mark.parametrize("fmt,block", [("e4m3", (128, 128)), ("e2m1", (128, 128)), ("e4m3", (32, 32))])
def test_variants(backend, fmt, block):
    x = torch.randn(130, 256)
    q_ref, sf_ref = ref.cast(x, fmt, block)
    assert_equal(tile_kernels.quant.per_block_cast_with_sf_only(x, fmt, block), sf_ref)
    for scale in (sf_ref, sf_ref * 0.75):  # a scale the cast would not pick: x is quantised with exactly 1 / sf
        q = tile_kernels.quant.per_block_cast_with_precomputed_sf(x, fmt, block, scale)
        assert_equal(q, ref.cast(x, fmt, block, sf=scale))
    q, sf = tile_kernels.quant.per_block_cast(x, fmt, block)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)
    assert backend != "ascend" or backend.served == ["per_block_cast_with_sf_only"] + \
        ["per_block_cast_with_precomputed_sf"] * 2 + ["per_block_cast"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt,block", [("e4m3", (128, 128)), ("e2m1", (32, 32)), ("e4m3", (128, 1))])
def test_special_blocks_follow_the_reference(host, dtype, fmt, block):
    """Blocks / columns whose maximum is NaN, infinite, zero or huge take the kernel's guarded path."""
    x = torch.randn(256, 1024) * 4
    x[3, 5] = float("nan")
    x[40, 300] = float("inf")
    x[200, 700] = -float("inf")
    x[128:160, 512:640] = -0.0
    x[170, 900] = 3e38
    x = x.to(dtype)
    if block[1] == 1:
        q, sf = tile_kernels.quant.per_channel_cast(x, fmt, block[0])
    else:
        q, sf = tile_kernels.quant.per_block_cast(x, fmt, block)
    q_ref, sf_ref = ref.cast(x, fmt, block)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)
