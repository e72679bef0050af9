"""Cast forms on the Ascend twin that the public-op files do not run on every backend: a precomputed scale
on a (data, sf) input, the kernel's clamp_min, and per_channel_cast_and_transpose served by the Ascend cast.
Bit-exact against the reference cast. The scale-only and precomputed-scale forms of plain inputs run on
every backend in tests/tile_kernels/quant/test_per_token_cast.py (test_sf_only_and_precomputed_sf) and
test_per_block_cast.py (test_variants)."""
import pytest
import torch

import tile_kernels
from tile_kernels import _dispatch
from tile_kernels.ascend import block_cast
from tile_kernels.reference import cast as ref
from tile_kernels.testing.numeric import assert_equal

Q = tile_kernels.quant


@pytest.fixture(autouse=True)
def _ascend(monkeypatch):
    monkeypatch.setenv("TK_BACKEND", "ascend")


def _x(rows=37, hidden=320):
    x = torch.randn(rows, hidden, generator=torch.Generator().manual_seed(rows)) * 3
    x[1] = 0.0
    return x


def test_per_token_precomputed_from_quant_input():
    xq = ref.cast(_x(), "e4m3", (1, 128), round_sf=True)
    sf = torch.rand(37, 3) + 0.01
    assert_equal(Q.per_token_cast_with_precomputed_sf(xq, "e4m3", 128, sf, x_block_size=(1, 128)),
                 ref.cast(xq, "e4m3", (1, 128), sf=sf, x_block_size=(1, 128)))


@pytest.mark.parametrize("clamp_min", [0.0, 0.5])
def test_clamp_min(clamp_min):
    x = _x()  # row 1 is all zero: with clamp_min 0 its scale is 0 and its multiplier 0, not inf
    q, sf = block_cast.per_token_cast(x, "e4m3", 64, clamp_min=clamp_min)
    q_ref, sf_ref = ref.cast(x, "e4m3", (1, 64), clamp_min=clamp_min)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)


def test_per_channel_cast_and_transpose_casts_on_ascend():
    # one kernel (ascend/channel_cast.py) casts and writes the data transposed; test_transpose.py covers the forms
    x = _x(256, 128).bfloat16()
    assert _dispatch.TABLE.serves("per_channel_cast_and_transpose", x.device, "float", x, "e4m3", (32, 1), None, False,
                             False, False, None, False, None) == "ascend"
    q, sf = block_cast.cast(x, "e4m3", (32, 1), False, False, False)
    q_ref, sf_ref = ref.cast(x, "e4m3", (32, 1))
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)
