"""Hand-computed checks of the reference's number formats: E2M1 code table and rounding, the
single-rounding FMA, the library exponential, E5M6 codes and a small cast."""
import math
import struct

import torch

from tile_kernels.reference.cast import cast, cast_back
from tile_kernels.reference.cast_e5m6 import e5m6_decode, e5m6_encode, pack_e5m6, unpack_e5m6
from tile_kernels.reference.numerics import e2m1_decode, e2m1_encode, exp_f32, fma, pack_e2m1, unpack_from_e2m1fn_x2


def test_e2m1_code_table():
    values = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    decoded = e2m1_decode(torch.arange(16))
    assert decoded[:8].tolist() == values
    assert decoded[8:].tolist() == [-v for v in values]
    assert torch.signbit(decoded[8])  # code 8 is -0.0


def _nearest_even(v: float) -> int:
    """Brute force: the grid code closest to |v|, ties to the even code, saturating at 6."""
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    a = min(abs(v), 6.0)
    best = min(range(8), key=lambda c: (abs(grid[c] - a), c % 2))
    return best | (8 if math.copysign(1.0, v) < 0 else 0)


def test_e2m1_encode_rounds_to_nearest_even():
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    probes = grid + [(a + b) / 2 for a, b in zip(grid, grid[1:], strict=False)] + [0.26, 0.74, 1.3, 2.49, 2.51, 5.01, 7.0, 1e9]
    probes += [-p for p in probes]
    codes = e2m1_encode(torch.tensor(probes)).tolist()
    assert codes == [_nearest_even(p) for p in probes]
    # the midpoints specifically: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5 -> 4.0
    mids = e2m1_decode(e2m1_encode(torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])))
    assert mids.tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]


def test_e2m1_packing_low_nibble_first():
    packed = pack_e2m1(torch.tensor([[2, 15]], dtype=torch.uint8))
    assert packed.view(torch.uint8).item() == 0xF2
    assert unpack_from_e2m1fn_x2(packed).tolist() == [[1.0, -6.0]]


def _f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def test_fma_rounds_once():
    # a*b + c where rounding a*b first loses the answer: (1 + 2^-23)(1 - 2^-23) - 1 = -2^-46.
    a, b, c = 1 + 2 ** -23, 1 - 2 ** -23, -1.0
    assert _f32(a) * _f32(b) - 1.0 == -(2 ** -46)
    assert fma(torch.tensor([a]), torch.tensor([b]), torch.tensor([c])).item() == -(2 ** -46)
    assert (torch.tensor([a]) * torch.tensor([b]) + torch.tensor([c])).item() == 0.0


def test_fma_breaks_double_rounding_ties():
    # 4097 * 16773121 = 2^36 + 1, so the exact sum with 2^60 lies just above the FP32 midpoint
    # 2^60 + 2^36. FP64 rounds it onto the midpoint and a plain FP32 rounding then goes down to
    # 2^60; the single rounding goes up to 2^60 + 2^37.
    a, b, c = torch.tensor([4097.0]), torch.tensor([16773121.0]), torch.tensor([2.0 ** 60])
    assert (a.double() * b.double() + c.double()).float().item() == 2.0 ** 60
    assert fma(a, b, c).item() == 2.0 ** 60 + 2.0 ** 37


def test_exp_f32_accuracy_and_range():
    x = torch.linspace(-86.9, 87.9, 200001)
    y = exp_f32(x).double()
    ref = torch.exp(x.double())
    ulp = torch.abs(torch.nextafter(ref.float(), torch.tensor(float("inf"))).double() - ref.float().double())
    assert float(((y - ref).abs() / ulp).max()) < 2.0
    assert exp_f32(torch.tensor([0.0])).item() == 1.0
    edge = exp_f32(torch.tensor([-100.0, 100.0, float("nan")]))
    assert edge[0].item() == 0.0 and math.isinf(edge[1].item()) and math.isnan(edge[2].item())


def test_e5m6_codes():
    v = torch.tensor([1.0, -1.0, 65024.0, 2.0 ** -20, 2.0 ** -14, 1.0 + 2 ** -7, 1.0 + 3 * 2 ** -7])
    codes = e5m6_encode(v)
    # 1.0 = half 0x3C00 -> 0x3C0; max 65024 = half 0x7BF0; 2^-20 = half 0x0010 (subnormal); 2^-14 = 0x0400.
    # 1 + 2^-7 is the tie between codes 0x3C0 and 0x3C1 -> even 0x3C0; 1 + 3*2^-7 ties up to 0x3C2.
    assert codes.tolist() == [0x3C0, 0xBC0, 0x7BF, 0x001, 0x040, 0x3C0, 0x3C2]
    assert e5m6_decode(codes).tolist() == [1.0, -1.0, 65024.0, 2.0 ** -20, 2.0 ** -14, 1.0, 1.0 + 2 ** -5]


def test_e5m6_pack_round_trip():
    codes = torch.randint(0, 4096, (3, 16), dtype=torch.int32)
    packed = pack_e5m6(codes)
    assert packed.shape == (3, 24) and packed.dtype == torch.uint8
    assert torch.equal(unpack_e5m6(packed), codes.to(torch.int64))
    # MSB first: code 0 fills the top 12 bits of the first little-endian word
    one = torch.zeros(1, 8, dtype=torch.int32)
    one[0, 0] = 0xABC
    assert pack_e5m6(one)[0, :4].tolist() == [0x00, 0x00, 0xC0, 0xAB]


def test_small_cast_by_hand():
    x = torch.tensor([[0.5, -1.0, 2.0, 4.0]])
    q, sf = cast(x, "e4m3", (1, 4))
    assert sf.item() == _f32(4.0 / 448.0)
    assert q.float().tolist() == [[56.0, -112.0, 224.0, 448.0]]
    q, sf = cast(x, "e4m3", (1, 4), round_sf=True)
    assert sf.item() == 2.0 ** -6 and q.float().tolist() == [[32.0, -64.0, 128.0, 256.0]]
    q, sf = cast(x, "e2m1", (1, 4))
    assert sf.item() == _f32(4.0 / 6.0)
    assert unpack_from_e2m1fn_x2(q).tolist() == [[1.0, -1.5, 3.0, 6.0]]  # 0.5 * 1.5 = 0.75: tie -> even code (1.0)
    assert cast_back((q, sf), "fp32", (1, 4)).shape == (1, 4)
