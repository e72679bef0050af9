"""Small integer helpers and the reference per-token FP8 cast (per 128 channels, amax/448)."""
from __future__ import annotations

import torch


def align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def ceil_div(x: int, y: int) -> int:
    return (x + y - 1) // y


def per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [T, H]`` -> (E4M3 ``[T, H]``, float32 scales ``[T, H/128]``): each 128-channel block is
    scaled so its absolute maximum (at least 1e-4) maps to 448. With ``use_ue8m0`` the scales are
    rounded up to powers of two."""
    t, h = x.shape
    if h % 128:
        raise ValueError(f"per_token_cast_to_fp8: hidden must be a multiple of 128, got {h}")
    blocks = x.float().view(t, h // 128, 128)
    amax = blocks.abs().amax(dim=2).clamp(min=1e-4)
    scale = amax / 448.0
    if use_ue8m0:
        scale = round_up_to_power_of_two(scale)
    fp8 = (blocks / scale.unsqueeze(2)).to(torch.float8_e4m3fn).view(t, h)
    return fp8, scale


def per_token_cast_back(x_fp8: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Inverse of the cast: float32 scales ``[T, H/128]`` or int32-packed UE8M0 ``[T, H/512]``."""
    t, h = x_fp8.shape
    if scales.dtype == torch.int32:
        scales = unpack_ue8m0(scales)
    return (x_fp8.float().view(t, -1, 128) * scales.float().unsqueeze(2)).view(t, h)


def unpack_ue8m0(packed: torch.Tensor) -> torch.Tensor:
    """int32 words holding 4 UE8M0 exponent bytes (low byte first) -> float32 scales ``2^(e-127)``."""
    e = packed.contiguous().reshape(-1).view(torch.uint8).view(*packed.shape[:-1], packed.shape[-1] * 4).to(torch.int32)
    return (e << 23).view(torch.float32)


def round_up_to_power_of_two(scale: torch.Tensor) -> torch.Tensor:
    """Positive float32 -> the next power of two at or above it, exactly (on the bits)."""
    bits = scale.float().view(torch.int32)
    exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).int()
    return (exponent << 23).view(torch.float32)
