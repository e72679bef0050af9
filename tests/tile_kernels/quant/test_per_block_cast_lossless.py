"""FP4 -> E4M3 with larger blocks must not change a single dequantised value; the host kernel and, on
every backend (the Ascend kernel on the twin included), the public op byte for byte against the reference
at ragged shapes. The forms the Ascend table leaves to the reference are in
tests/tile_kernels/ascend/test_lossless.py."""
import random

import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.quant.lossless import _lossless_ref
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


@pytest.mark.parametrize("in_col,out_block,out_col", [(False, (32, 32), False), (True, (128, 128), True),
                                                      (False, (1, 128), True)])
def test_matches_reference_at_tails(backend, in_col, out_block, out_col):
    """150 rows and 576 columns (tails of every output block), values over six decades and a zero input
    block (its scale is the floor's); input scales FP32 row-major or packed column-major, output scales
    row-major or packed column-major: the E4M3 bytes and the scales themselves as the reference's."""
    x = torch.randn(150, 576, generator=torch.Generator().manual_seed(3)) * torch.logspace(-3, 3, 576)
    x[:, 64:96] = 0.0
    q, sf = ref.cast(x, "e2m1", (1, 32), round_sf=True, use_tma_aligned_col_major_sf=in_col, use_packed_ue8m0=in_col)
    data, out_sf = tile_kernels.quant.per_block_cast_lossless((q, sf), "e4m3", (1, 32), out_block,
                                                              use_tma_aligned_col_major_sf=out_col, round_sf=True,
                                                              use_packed_ue8m0=out_col)
    assert backend != "ascend" or backend.served == ["per_block_cast_lossless"]
    want_data, want_sf = _lossless_ref(q, sf, (1, 32), out_block, out_col, out_col)
    assert_equal(data.view(torch.uint8), want_data.view(torch.uint8))
    assert_equal(out_sf, want_sf)
