"""Number formats and the utils quantisers, checked against hand-computed values."""
import pytest
import torch

from deep_gemm import formats
from deep_gemm.utils import (
    cast_back_from_fp4,
    ceil_to_ue8m0,
    pack_ue8m0_to_int,
    pack_ue8m0_to_short,
    per_block_cast_to_fp8,
    per_channel_cast_to_fp8,
    per_custom_dims_cast_to_fp8,
    per_token_cast_to_fp4,
    per_token_cast_to_fp8,
    transpose_packed_fp4,
    unpack_ue8m0_from_int,
    unpack_ue8m0_from_short,
)


def test_fp4_nibble_table():
    # Every code 0..15 written out by hand: magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
    expected = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    assert formats.fp4_codes_to_float(torch.arange(16)).tolist() == expected


def test_fp4_packing_low_nibble_first():
    # Byte 0x72 holds element 0 = code 2 (1.0) in the low nibble and element 1 = code 7 (6.0) in the high one.
    packed = torch.tensor([[0x72, 0x9F]], dtype=torch.uint8).view(torch.int8)
    assert formats.unpack_fp4(packed).tolist() == [[1.0, 6.0, -6.0, -0.5]]
    assert formats.unpack_fp4(packed.view(torch.float4_e2m1fn_x2)).tolist() == [[1.0, 6.0, -6.0, -0.5]]


def test_fp4_rounding_to_nearest_code():
    x = torch.tensor([0.25, 0.26, 0.74, 0.76, 2.49, 2.51, 5.0, 5.01, 100.0, -0.1, -0.3])
    # midpoints go down (strictly greater is needed to round up); -0.1 rounds to +0.
    assert formats.float_to_fp4_codes(x).tolist() == [0, 1, 1, 2, 4, 5, 6, 7, 7, 0, 9]


def test_ue8m0_rounding():
    x = torch.tensor([1.0, 1.5, 0.3, 448.0, 1e-45, 3e38])
    # 1 stays, 1.5 -> 2, 0.3 -> 0.5, 448 -> 512, denormal clamps to 2^-126, huge clamps to 2^127.
    assert ceil_to_ue8m0(x).tolist() == [1.0, 2.0, 0.5, 512.0, 2.0 ** -126, 2.0 ** 127]


def test_packed_scale_round_trip_by_hand():
    sf = torch.tensor([[1.0, 2.0, 0.5, 4.0]])
    # exponents 127, 128, 126, 129 little-endian: 0x817E807F
    word = pack_ue8m0_to_int(sf)
    assert word.dtype == torch.int32 and word.item() == 0x817E807F - (1 << 32)
    assert unpack_ue8m0_from_int(word).tolist() == sf.tolist()
    shorts = pack_ue8m0_to_short(sf)
    assert shorts.view(torch.uint16).tolist() == [[0x807F, 0x817E]]
    assert unpack_ue8m0_from_short(shorts).tolist() == sf.tolist()


def test_pack_rejects_mantissa():
    with pytest.raises(ValueError):
        pack_ue8m0_to_int(torch.tensor([[1.0, 1.5, 1.0, 1.0]]))
    with pytest.raises(ValueError):
        pack_ue8m0_to_short(torch.tensor([[3.0, 1.0]]))


def test_per_token_cast_to_fp8_hand_case():
    x = torch.tensor([[448.0, -224.0, 1.0, 0.0]])
    q, sf = per_token_cast_to_fp8(x, use_ue8m0=False, gran_k=2)
    # block 0: amax 448 -> sf 1; block 1: amax 1 -> sf 1/448
    assert sf.tolist() == [[1.0, pytest.approx(1 / 448)]]
    assert q.float().tolist() == [[448.0, -224.0, 448.0, 0.0]]
    q, sf = per_token_cast_to_fp8(x, use_ue8m0=True, gran_k=2)
    assert sf.tolist() == [[1.0, 2.0 ** -8]]          # 1/448 rounds up to 1/256
    assert q.float().tolist() == [[448.0, -224.0, 256.0, 0.0]]


def test_quantisers_reconstruct():
    x = torch.randn(256, 320)
    for use_ue8m0 in (False, True):
        q, sf = per_token_cast_to_fp8(x, use_ue8m0)
        assert sf.shape == (256, 3)
        back = q.float() * sf.repeat_interleave(128, 1)[:, :320]
        assert (back - x).abs().max() < 0.07 * x.abs().max()
        q, sf = per_block_cast_to_fp8(x, use_ue8m0)
        assert sf.shape == (2, 3)
        back = q.float() * sf.repeat_interleave(128, 0).repeat_interleave(128, 1)[:, :320]
        assert (back - x).abs().max() < 0.07 * x.abs().max()
        q, sf = per_channel_cast_to_fp8(x, use_ue8m0)
        assert sf.shape == (2, 320)
        q, sf = per_custom_dims_cast_to_fp8(x.view(16, 16, 320), (0, 2), use_ue8m0)
        assert sf.shape == (16, 320)


def test_fp4_cast_round_trip_and_transpose():
    x = torch.randn(8, 64)
    packed, sf = per_token_cast_to_fp4(x, use_ue8m0=True, gran_k=32)
    assert packed.shape == (8, 32) and packed.dtype == torch.int8 and sf.shape == (8, 2)
    back = cast_back_from_fp4(packed, sf, gran_k=32)
    assert (back - x).abs().max() <= sf.max() * 1.0 + 1e-6     # one E2M1 step at most
    packed_i, sf_i = per_token_cast_to_fp4(x, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)
    assert torch.equal(packed_i, packed) and sf_i.shape == (8, 1)
    assert torch.equal(cast_back_from_fp4(packed_i, sf_i, gran_k=32, use_packed_ue8m0=True), back)
    t = transpose_packed_fp4(packed)
    assert t.shape == (64, 4)
    assert torch.equal(formats.unpack_fp4(t), formats.unpack_fp4(packed).t())
