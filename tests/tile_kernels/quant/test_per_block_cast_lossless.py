"""FP4 -> E4M3 with larger blocks must not change a single dequantised value."""
import random

import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.testing.generator import generate_rand_float
from tile_kernels.testing.numeric import assert_equal


@pytest.mark.parametrize("out_block", [(1, 128), (32, 32), (128, 128)])
@pytest.mark.parametrize("in_layout", [(False, False), (True, True)])
@pytest.mark.parametrize("out_layout", [(False, False), (True, False), (True, True)])
def test_lossless(out_block, in_layout, out_layout):
    random.seed(out_block[0] + out_block[1])
    x = generate_rand_float((96, 256))
    # keep each output block's dynamic range within what E4M3 can hold for shifted FP4 values
    mag = x.abs().clamp(min=1e-30)
    x = torch.where(mag < mag.max() / 2 ** 9, torch.sign(x) * mag.max() / 2 ** 9, x)
    x_in = ref.cast(x, "e2m1", (1, 32), round_sf=True, use_tma_aligned_col_major_sf=in_layout[0],
                    use_packed_ue8m0=in_layout[1])
    col, packed = out_layout
    q, sf = tile_kernels.quant.per_block_cast_lossless(x_in, "e4m3", (1, 32), out_block,
                                                       use_tma_aligned_col_major_sf=col, round_sf=True,
                                                       use_packed_ue8m0=packed)
    assert q.dtype == torch.float8_e4m3fn
    assert_equal(ref.cast_back((q, sf), "fp32", out_block), ref.cast_back(x_in, "fp32", (1, 32)))


@pytest.mark.parametrize("shape,in_block,out_block", [((130, 224), (1, 32), (128, 128)), ((37, 96), (1, 16), (32, 64)),
                                                      ((70, 160), (2, 32), (4, 32))])
@pytest.mark.parametrize("layout", [(False, False), (True, False), (True, True)])
def test_host_matches_reference(monkeypatch, shape, in_block, out_block, layout):
    """Ragged shapes and a dynamic range wider than E4M3 holds (small blocks underflow): every byte
    and scale as the reference computes them."""
    x = torch.randn(shape) * torch.exp2(torch.randint(-40, 40, (shape[0], 1)).float())
    x[:, : shape[1] // 3] *= 2.0 ** -30
    x_in = ref.cast(x, "e2m1", in_block, round_sf=True, use_tma_aligned_col_major_sf=layout[0],
                    use_packed_ue8m0=layout[1])
    args = (x_in, "e4m3", in_block, out_block)
    kwargs = dict(use_tma_aligned_col_major_sf=layout[0], round_sf=True, use_packed_ue8m0=layout[1])
    monkeypatch.setenv("TK_BACKEND", "host")
    got = tile_kernels.quant.per_block_cast_lossless(*args, **kwargs)
    monkeypatch.setenv("TK_BACKEND", "reference")
    want = tile_kernels.quant.per_block_cast_lossless(*args, **kwargs)
    assert_equal(got[0], want[0])
    assert_equal(got[1], want[1])
