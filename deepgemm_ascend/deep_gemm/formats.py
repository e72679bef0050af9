"""Bit-level number formats: FP4 E2M1 (two per byte, low nibble first) and UE8M0 scale factors.

UE8M0 scales come in four containers, all decoded here to FP32:
- FP32 values (only the exponent matters when a power of two is required),
- ``torch.float8_e8m0fnu`` (one exponent byte per scale),
- int32 words holding 4 exponent bytes (NVIDIA SM100; K-block 4j in bits 0-7, 4j+1 in bits 8-15, ...),
- int16 words holding 2 exponent bytes (Ascend "MX" pairs; K-block 2j in the low byte).
"""
from __future__ import annotations

import torch

FP4_DTYPES = (torch.int8, torch.float4_e2m1fn_x2)
FP8_DTYPE = torch.float8_e4m3fn
# Magnitudes of E2M1 codes 0..7; bit 3 is the sign.
FP4_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# A magnitude gets the code equal to the number of these midpoints it strictly exceeds.
FP4_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
PACKED_SF_DTYPES = {torch.int32: 4, torch.int16: 2}


def dense(t: torch.Tensor) -> torch.Tensor:
    """Row-major storage, including unit stride on size-1 last dims (needed to reinterpret dtypes)."""
    if t.is_contiguous() and (t.dim() == 0 or t.stride(-1) == 1):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def is_fp4(t: torch.Tensor) -> bool:
    return t.dtype in FP4_DTYPES


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The same storage seen as uint8 (FP4 containers, int8, float8 types)."""
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def fp4_codes_to_float(codes: torch.Tensor) -> torch.Tensor:
    """4-bit E2M1 codes (any integer dtype, values 0..15) to FP32; -0 decodes as +0."""
    table = torch.tensor(FP4_E2M1_VALUES, dtype=torch.float32, device=codes.device)
    codes = codes.to(torch.int64)
    magnitude = table[codes & 7]
    return torch.where((codes & 8) != 0, -magnitude, magnitude)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Packed E2M1 bytes ``[..., n/2]`` to FP32 ``[..., n]`` (low nibble = even element)."""
    b = as_bytes(packed).to(torch.int64)
    codes = torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2)
    return fp4_codes_to_float(codes)


def float_to_fp4_codes(x: torch.Tensor) -> torch.Tensor:
    """Round-to-nearest E2M1 codes (uint8, 0..15) as the upstream test quantiser does it."""
    ax = x.abs().float()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for boundary in FP4_E2M1_MIDPOINTS:
        code += (ax > boundary).to(torch.uint8)
    negative = (x < 0) & (code != 0)
    return code | (negative.to(torch.uint8) << 3)


def pack_fp4_codes(codes: torch.Tensor) -> torch.Tensor:
    """Codes ``[..., n]`` (n even) to bytes ``[..., n/2]`` as int8 (the NVIDIA container)."""
    c = codes.to(torch.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).view(torch.int8)


def ue8m0_exponent(x: torch.Tensor) -> torch.Tensor:
    """The biased 8-bit exponent of FP32 values (mantissa and sign ignored), as int32."""
    return (dense(x.float()).view(torch.int32) >> 23) & 0xFF


def exponent_to_float(e: torch.Tensor) -> torch.Tensor:
    """Biased exponents 0..255 to FP32 as UE8M0 (OCP MX, torch's float8_e8m0fnu) means them: ``2^(e-127)``,
    0 the subnormal 2^-127 (not 0) and 255 NaN (not +inf)."""
    e = e.to(torch.int32)
    bits = torch.where(e == 0, 0x00400000, torch.where(e == 255, 0x7FC00000, e << 23))
    return bits.to(torch.int32).view(torch.float32)


def is_power_of_two(x: torch.Tensor) -> torch.Tensor:
    """Elementwise: a positive normal FP32 power of two (what UE8M0 can hold exactly)."""
    bits = dense(x.float()).view(torch.int32)
    e = (bits >> 23) & 0xFF
    return (bits >= 0) & ((bits & 0x7FFFFF) == 0) & (e > 0) & (e < 255)


def unpack_ue8m0(packed: torch.Tensor) -> torch.Tensor:
    """Packed UE8M0 (int32: 4 per word, int16: 2 per word, or float8_e8m0fnu: 1 per byte) to FP32.

    The last dimension grows by the number of scales per word; the order is little-endian."""
    if packed.dtype == torch.float8_e8m0fnu:
        return exponent_to_float(dense(packed).view(torch.uint8).to(torch.int32))
    per_word = PACKED_SF_DTYPES[packed.dtype]
    b = dense(packed).view(torch.uint8).to(torch.int32)
    assert b.size(-1) == packed.size(-1) * per_word
    return exponent_to_float(b)


def pack_ue8m0(sf: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """FP32 scales ``[..., s]`` to words of ``dtype`` (int32 or int16), padding s with exponent 0.

    Only the exponent byte is kept (a mantissa is dropped, as NVIDIA's packer does)."""
    per_word = PACKED_SF_DTYPES[dtype]
    e = ue8m0_exponent(sf).to(torch.uint8)
    pad = (-e.size(-1)) % per_word
    if pad:
        e = torch.nn.functional.pad(e, (0, pad))
    if e.numel() == 0:
        return torch.zeros(e.shape[:-1] + (e.size(-1) // per_word,), dtype=dtype, device=e.device)
    return dense(e).view(dtype)
