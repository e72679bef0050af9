"""Bit-level number helpers of the references: a single-rounding FP32 FMA, the FP4 E2M1 code
table, power-of-two scale rounding and the library's FP32 exponential."""
import torch

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def fma(a: torch.Tensor, b, c) -> torch.Tensor:
    """``a * b + c`` on FP32 values rounded once, as a fused multiply-add does.

    The product of two FP32 numbers is exact in FP64. The FP64 sum rounds once; rounding that
    to FP32 is only wrong when the FP64 sum lands exactly halfway between two FP32 numbers
    while the exact sum does not, so the error of the FP64 sum (TwoSum) breaks those ties."""
    a, b, c = (torch.as_tensor(v, dtype=torch.float32, device=a.device) for v in (a, b, c))
    p = a.double() * b.double()
    cd = c.double()
    s = p + cd
    bv = s - p
    err = (p - (s - bv)) + (cd - bv)
    r = s.float()
    rd = r.double()
    towards = torch.where(s > rd, torch.full_like(r, float("inf")), torch.full_like(r, -float("inf")))
    r2 = torch.nextafter(r, towards)
    tie = (s != rd) & (s == (rd + r2.double()) * 0.5) & (err != 0)
    pick_r2 = tie & ((err > 0) == (r2.double() > rd))
    return torch.where(pick_r2, r2, r)


def e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """FP32 -> 4-bit E2M1 codes (uint8): round to nearest, ties to the even code, saturate at 6."""
    a = v.abs()
    # Boundaries between neighbouring grid values; at a midpoint the even code wins, so the
    # comparison is strict where the upper neighbour's code is odd and inclusive where it is even.
    code = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for bound, inclusive in ((0.25, False), (0.75, True), (1.25, False), (1.75, True),
                             (2.5, False), (3.5, True), (5.0, False)):
        code += (a >= bound if inclusive else a > bound).to(torch.uint8)
    sign = (torch.signbit(v).to(torch.uint8) << 3)
    return code | sign


def e2m1_decode(code: torch.Tensor, out_dtype=torch.float32) -> torch.Tensor:
    """4-bit codes (any integer dtype, values 0..15; bit 3 is the sign) -> values."""
    c = code.to(torch.int64) & 0xF
    mag = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=code.device)[c & 7]
    return torch.where((c & 8) != 0, -mag, mag).to(out_dtype)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """(..., 2n) codes -> (..., n) int8 bytes, even column in the low nibble."""
    pairs = codes.view(*codes.shape[:-1], codes.shape[-1] // 2, 2).to(torch.uint8)
    return (pairs[..., 0] | (pairs[..., 1] << 4)).view(torch.int8)


def unpack_from_e2m1fn_x2(x: torch.Tensor, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Packed FP4 bytes (int8/uint8, last dim n) -> values (last dim 2n)."""
    if x.dtype not in (torch.int8, torch.uint8):
        raise TypeError(f"x: expected dtype torch.int8 or torch.uint8, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("x: expected at least 1 dimension (the last dim is doubled), got a 0-D tensor")
    b = x.view(torch.uint8)
    codes = torch.stack([b & 0xF, b >> 4], dim=-1).reshape(*x.shape[:-1], x.shape[-1] * 2)
    return e2m1_decode(codes, out_dtype)


def ceil_pow2_bits(sf: torch.Tensor) -> torch.Tensor:
    """Positive FP32 scales rounded up to a power of two (exponent ceil), as int32 bit patterns."""
    return (sf.view(torch.int32) + 0x7FFFFF) & 0x7F800000


# exp_f32: the library's FP32 exponential. torch.exp on CPU mixes SLEEF (vector body) and libm
# (tails), so its last bit depends on a value's position; kernels could never match it. This one
# is defined by plain FP32 multiplies and adds (no fused operations), so any implementation that
# performs the same operations reproduces it bit for bit; its error is about 1 ulp. Below -87 it
# flushes to 0 and above 88 it saturates to +inf.
EXP_LOG2E = 1.4426950408889634
EXP_LN2_HI = 0.693359375
EXP_LN2_LO = -2.12194440e-4
EXP_POLY = (1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0)
EXP_MIN, EXP_MAX = -87.0, 88.0


def exp_f32(x: torch.Tensor) -> torch.Tensor:
    x = x.to(torch.float32)
    xc = x.clamp(EXP_MIN, EXP_MAX)
    n = torch.round(xc * EXP_LOG2E)
    r = xc - n * EXP_LN2_HI
    r = r - n * EXP_LN2_LO
    p = torch.full_like(r, EXP_POLY[0])
    for c in EXP_POLY[1:]:
        p = p * r + c
    two_n = ((n.to(torch.int32) + 127) << 23).view(torch.float32)
    y = p * two_n
    y = torch.where(x > EXP_MAX, torch.full_like(y, float("inf")), y)
    return torch.where(x < EXP_MIN, torch.zeros_like(y), y)
