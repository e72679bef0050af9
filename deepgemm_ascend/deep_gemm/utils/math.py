"""Integer helpers, UE8M0 rounding and packing, and the FP8/FP4 quantisers the tests use.

Each quantiser returns ``(values, scale_factors)`` with ``x ~= values * sf`` per block."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from deepjit import validation as V

from .. import formats

FP8_MAX = 448.0
FP4_MAX = 6.0
AMAX_FLOOR = 1e-4


def ceil_div(x: int, y: int) -> int:
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    return ceil_div(x, y) * y


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """Round |x| up to a power of two (exponent clamped to [1, 254]), as FP32."""
    bits = formats.dense(x.abs().float()).view(torch.int32)
    e = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return formats.exponent_to_float(e.clamp(1, 254))


def pack_ue8m0_to_int(x: torch.Tensor) -> torch.Tensor:
    """FP32 powers of two ``[..., 4s]`` to int32 ``[..., s]`` (4 exponent bytes per word, little-endian)."""
    if x.dtype != torch.float32 or x.size(-1) % 4 != 0:
        raise V.fail("x (pack_ue8m0_to_int)", "float32 with a last dim divisible by 4", f"{x.dtype} {tuple(x.shape)}")
    bits = formats.dense(x).view(torch.int32)
    ok = (bits >= 0) & ((bits & 0x7FFFFF) == 0)
    if not bool(ok.all()):
        raise V.fail("x (pack_ue8m0_to_int)", "non-negative powers of two (zero mantissa)", _first_bad(x, ok))
    return formats.pack_ue8m0(x, torch.int32)


def unpack_ue8m0_from_int(packed_sf: torch.Tensor) -> torch.Tensor:
    """int32 words ``[..., s]`` to FP32 scales ``[..., 4s]``."""
    return formats.unpack_ue8m0(packed_sf)


def pack_ue8m0_to_short(x: torch.Tensor) -> torch.Tensor:
    """FP32 powers of two ``[..., 2s]`` to the Ascend int16 form ``[..., s]`` (2 exponents per word)."""
    if x.dtype != torch.float32 or x.size(-1) % 2 != 0:
        raise V.fail("x (pack_ue8m0_to_short)", "float32 with an even last dim", f"{x.dtype} {tuple(x.shape)}")
    ok = formats.is_power_of_two(x)
    if not bool(ok.all()):
        raise V.fail("x (pack_ue8m0_to_short)", "positive powers of two (zero mantissa)", _first_bad(x, ok))
    return formats.pack_ue8m0(x, torch.int16)


def unpack_ue8m0_from_short(packed_sf: torch.Tensor) -> torch.Tensor:
    """int16 words ``[..., s]`` to FP32 scales ``[..., 2s]``."""
    return formats.unpack_ue8m0(packed_sf)


def _finish_sf(amax: torch.Tensor, fmt_max: float, use_ue8m0: bool) -> torch.Tensor:
    sf = amax.clamp(min=AMAX_FLOOR) / fmt_max
    return ceil_to_ue8m0(sf) if use_ue8m0 else sf


def per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                          use_packed_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows quantised in 1 x gran_k blocks: values ``[M, N]`` FP8, SF ``[M, ceil(N/gran_k)]``."""
    assert x.dim() == 2, f"x must be 2-D, got {tuple(x.shape)}"
    m, n = x.shape
    padded = torch.zeros((m, align(n, gran_k)), dtype=x.dtype, device=x.device)
    padded[:, :n] = x
    blocks = padded.view(m, -1, gran_k).float()
    sf = _finish_sf(blocks.abs().amax(dim=2), FP8_MAX, use_ue8m0)
    q = (blocks * (1.0 / sf.unsqueeze(2))).to(torch.float8_e4m3fn).view(m, -1)[:, :n].contiguous()
    if use_packed_ue8m0:
        assert use_ue8m0, "use_packed_ue8m0 needs use_ue8m0"
        sf = torch.nn.functional.pad(sf, (0, (-sf.size(-1)) % 4), value=1.0)
        return q, pack_ue8m0_to_int(sf)
    return q, sf


def per_channel_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Columns quantised in gran_k x 1 blocks: values ``[M, N]``, SF ``[M/gran_k, N]`` (M % gran_k == 0)."""
    assert x.dim() == 2 and x.size(0) % gran_k == 0, f"x must be 2-D with rows divisible by {gran_k}"
    m, n = x.shape
    blocks = x.view(-1, gran_k, n).float()
    sf = _finish_sf(blocks.abs().amax(dim=1), FP8_MAX, use_ue8m0)
    return (blocks * (1.0 / sf.unsqueeze(1))).to(torch.float8_e4m3fn).view(m, n), sf


def per_block_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """gran_k x gran_k blocks: values ``[M, N]``, SF ``[ceil(M/g), ceil(N/g)]``."""
    assert x.dim() == 2, f"x must be 2-D, got {tuple(x.shape)}"
    m, n = x.shape
    padded = torch.zeros((align(m, gran_k), align(n, gran_k)), dtype=x.dtype, device=x.device)
    padded[:m, :n] = x
    blocks = padded.view(padded.size(0) // gran_k, gran_k, padded.size(1) // gran_k, gran_k).float()
    sf = _finish_sf(blocks.abs().amax(dim=(1, 3), keepdim=True), FP8_MAX, use_ue8m0)
    q = (blocks * (1.0 / sf)).to(torch.float8_e4m3fn).view_as(padded)[:m, :n].contiguous()
    return q, sf.view(blocks.size(0), blocks.size(2))


def per_custom_dims_cast_to_fp8(x: torch.Tensor, dims: Sequence[int], use_ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One scale per index of ``dims``; the amax runs over every other dimension."""
    kept = set(d % x.dim() for d in dims)
    reduced = tuple(i for i in range(x.dim()) if i not in kept)
    sf = _finish_sf(x.abs().float().amax(dim=reduced, keepdim=True), FP8_MAX, use_ue8m0)
    return (x.float() * (1.0 / sf)).to(torch.float8_e4m3fn), sf.squeeze()


def per_token_cast_to_fp4(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                          use_packed_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows to E2M1 in 1 x gran_k blocks: packed int8 ``[M, N/2]``, SF ``[M, ceil(N/gran_k)]``.

    With ``use_packed_ue8m0`` the SF count is padded to a multiple of 4 with 1.0 and packed to int32."""
    assert x.dim() == 2 and x.size(1) % 2 == 0, f"x must be 2-D with an even last dim, got {tuple(x.shape)}"
    assert use_ue8m0 or not use_packed_ue8m0, "use_packed_ue8m0 needs use_ue8m0"
    m, n = x.shape
    padded = torch.zeros((m, align(n, gran_k)), dtype=x.dtype, device=x.device)
    padded[:, :n] = x
    blocks = padded.view(m, -1, gran_k).float()
    sf = _finish_sf(blocks.abs().amax(dim=2), FP4_MAX, use_ue8m0)
    codes = formats.float_to_fp4_codes(blocks * (1.0 / sf.unsqueeze(2))).view(m, -1)
    packed = formats.pack_fp4_codes(codes)[:, :n // 2].contiguous()
    if use_packed_ue8m0:
        sf = torch.nn.functional.pad(sf, (0, (-sf.size(-1)) % 4), value=1.0)
        return packed, pack_ue8m0_to_int(sf)
    return packed, sf


def transpose_packed_fp4(a: torch.Tensor) -> torch.Tensor:
    """Packed FP4 ``[M, N/2]`` to the packed transpose ``[N, M/2]`` (M even), contiguous."""
    assert a.dim() == 2 and a.size(0) % 2 == 0, f"a must be 2-D packed FP4 with an even row count, got {tuple(a.shape)}"
    b = formats.as_bytes(a).to(torch.int64)
    codes = torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2)      # [M, N]
    out = formats.pack_fp4_codes(codes.t().contiguous())             # [N, M/2]
    return out.view(a.dtype) if a.dtype != torch.int8 else out


def cast_back_from_fp4(packed: torch.Tensor, sf: torch.Tensor, gran_k: int = 128,
                       use_packed_ue8m0: bool = False) -> torch.Tensor:
    """Dequantise packed FP4 ``[M, N/2]`` with per-row SF ``[M, ceil(N/gran_k)]`` (FP32 or packed int32)."""
    if use_packed_ue8m0:
        sf = unpack_ue8m0_from_int(sf)
    values = formats.unpack_fp4(packed)
    n = values.size(-1)
    return values * sf.float()[:, torch.arange(n, device=packed.device) // gran_k]


def _first_bad(x: torch.Tensor, ok: torch.Tensor) -> str:
    at = tuple(int(i) for i in (~ok).nonzero()[0])
    return f"x[{', '.join(map(str, at))}] = {float(x[at])!r}"
