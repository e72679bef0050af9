"""The scale-only, precomputed-scale and clamp_min forms of the casts on the Ascend twin, through the public
ops with TK_BACKEND=ascend: bit-exact against the reference cast at ragged sizes, for plain and (data, sf)
inputs, per-token and per-block blocks, E4M3 and E2M1."""
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


@pytest.mark.parametrize("fmt,npc,round_sf", [("e4m3", 128, False), ("e2m1", 32, True)])
def test_per_token_sf_only_and_precomputed(fmt, npc, round_sf):
    x = _x()
    sf = Q.per_token_cast_with_sf_only(x, fmt, npc, round_sf=round_sf)
    assert_equal(sf, ref.cast(x, fmt, (1, npc), round_sf=round_sf)[1])
    sf = sf * 1.5  # a scale the cast would not pick: x is quantised with exactly 1 / sf
    assert _dispatch.TABLE.serves("per_token_cast_with_precomputed_sf", x.device, "plain", x, fmt, (1, npc), None, False,
                             round_sf, False, sf, False, None) == "ascend"
    assert_equal(Q.per_token_cast_with_precomputed_sf(x, fmt, npc, sf, round_sf=round_sf),
                 ref.cast(x, fmt, (1, npc), sf=sf))


def test_per_token_precomputed_from_quant_input():
    xq = ref.cast(_x(), "e4m3", (1, 128), round_sf=True)
    sf = torch.rand(37, 3) + 0.01
    assert_equal(Q.per_token_cast_with_precomputed_sf(xq, "e4m3", 128, sf, x_block_size=(1, 128)),
                 ref.cast(xq, "e4m3", (1, 128), sf=sf, x_block_size=(1, 128)))


@pytest.mark.parametrize("block", [(128, 128), (32, 32)])
def test_per_block_sf_only_and_precomputed(block):
    x = _x(150, 192)
    sf = Q.per_block_cast_with_sf_only(x, "e4m3", block)
    assert_equal(sf, ref.cast(x, "e4m3", block)[1])
    sf = sf * 0.75
    assert_equal(Q.per_block_cast_with_precomputed_sf(x, "e4m3", block, sf), ref.cast(x, "e4m3", block, sf=sf))


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
