"""E5M6: 12-bit floats (1 sign, 5 exponent bits with bias 15, 6 mantissa bits; max 65024), eight
codes packed MSB-first into three little-endian uint32 words, with a per-token FP32 scale."""
from __future__ import annotations

import torch

from .cast import format_sf, transform_sf
from .numerics import ceil_pow2_bits

E5M6_MAX = 65024.0


def _fp16_bits_toward_zero(v: torch.Tensor) -> torch.Tensor:
    """FP32 -> IEEE half bit patterns (int32), truncating the mantissa; overflow -> inf, NaN kept."""
    bits = v.view(torch.int32)
    sign = (bits >> 16) & 0x8000
    exp = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    normal = sign | ((exp - 112) << 10) | (mant >> 13)
    shift = (126 - exp).clamp(0, 31)  # 113 - exp + 13
    sub = sign | ((mant | 0x800000) >> shift)
    out = torch.where(exp >= 113, normal, torch.where(exp >= 103, sub, sign))
    out = torch.where((exp > 142) & (exp < 255), sign | 0x7C00, out)
    return torch.where(exp == 255, torch.where(mant == 0, sign | 0x7C00, sign | 0x7FFF), out)


def e5m6_encode(v: torch.Tensor) -> torch.Tensor:
    """FP32 -> 12-bit codes (int32): the top 12 bits of the truncated half, then round half to even
    on the 17 FP32 bits below the kept ones."""
    v = v.contiguous()
    code = _fp16_bits_toward_zero(v) >> 4
    rest = v.view(torch.int32) & 0x1FFFF
    return (code + ((code & 1) + rest > 0x10000).to(torch.int32)) & 0xFFF


def e5m6_decode(code: torch.Tensor) -> torch.Tensor:
    return ((code.to(torch.int32) << 4) & 0xFFFF).to(torch.int16).view(torch.float16).to(torch.float32)


def pack_e5m6(code: torch.Tensor) -> torch.Tensor:
    t = code.shape[0]
    h = code.to(torch.int64).view(t, -1, 8).unbind(-1)
    w0 = (h[0] << 20) | (h[1] << 8) | (h[2] >> 4)
    w1 = ((h[2] & 0xF) << 28) | (h[3] << 16) | (h[4] << 4) | (h[5] >> 8)
    w2 = ((h[5] & 0xFF) << 24) | (h[6] << 12) | h[7]
    words = torch.stack([w0, w1, w2], -1).view(t, -1)
    return words.to(torch.int32).view(torch.uint8).view(t, -1)  # int64 -> int32 keeps the low 32 bits


def unpack_e5m6(packed: torch.Tensor) -> torch.Tensor:
    t = packed.shape[0]
    w = packed.contiguous().view(torch.int32).view(t, -1, 3).to(torch.int64) & 0xFFFFFFFF
    w0, w1, w2 = w.unbind(-1)
    codes = [w0 >> 20, w0 >> 8, (w0 << 4) | (w1 >> 28), w1 >> 16, w1 >> 4, (w1 << 8) | (w2 >> 24), w2 >> 12, w2]
    return torch.stack([c & 0xFFF for c in codes], -1).view(t, -1)


def cast_to_e5m6(x: torch.Tensor, num_per_channels: int, use_tma_aligned_col_major_sf: bool = False,
                 round_sf: bool = False, use_packed_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.to(torch.float32)
    t, h = xf.shape
    g = h // num_per_channels
    amax = xf.view(t, g, num_per_channels).abs().amax(-1).clamp(min=1e-4)
    fmt_max = torch.full_like(amax, E5M6_MAX)
    sf = amax / fmt_max
    if round_sf:
        sf = ceil_pow2_bits(sf).view(torch.float32)
        sf_inv = 1.0 / sf
    else:
        sf_inv = fmt_max / amax
    scaled = (xf.view(t, g, num_per_channels) * sf_inv.unsqueeze(-1)).view(t, h)
    packed = pack_e5m6(e5m6_encode(scaled))
    if use_packed_ue8m0 and not use_tma_aligned_col_major_sf:
        # row-major packed exponents: (T, ceil(g/4)) int32
        exps = torch.nn.functional.pad(((sf.view(torch.int32) >> 23) & 0xFF).to(torch.uint8), (0, (-g) % 4))
        return packed, exps.view(torch.int32)
    return packed, format_sf(sf, use_tma_aligned_col_major_sf, use_packed_ue8m0)


def cast_back_from_e5m6(x: tuple[torch.Tensor, torch.Tensor], fmt: str, x_block_size: tuple[int, int]) -> torch.Tensor:
    data, sf = x
    t = data.shape[0]
    h = data.shape[1] * 2 // 3
    values = e5m6_decode(unpack_e5m6(data))
    s = transform_sf(sf)
    s = s.repeat_interleave(x_block_size[0], 0).repeat_interleave(x_block_size[1], 1)[:t, :h]
    return (values * s).to(torch.float32 if fmt == "fp32" else torch.bfloat16)
