"""Block-scaled FP8 (E4M3) / FP4 (E2M1) casts and cast-backs: the semantics every quant op follows.

A block of ``block_size = (rows, cols)`` elements shares one scale factor ``sf`` with
``x ~= q * sf``: ``sf = max(amax, clamp_min) / fmt_max``; optionally rounded up to a power of two.
"""
from __future__ import annotations

from typing import Union

import torch
import torch.nn.functional as F

from ..utils import align, ceil_div
from .numerics import ceil_pow2_bits, e2m1_encode, pack_e2m1, unpack_from_e2m1fn_x2

QuantTensor = tuple[torch.Tensor, torch.Tensor]

FMT_DTYPE = {"e4m3": torch.float8_e4m3fn, "e2m1": torch.int8}
FMT_MAX = {"e4m3": 448.0, "e2m1": 6.0}
FMT_CLAMP_MIN = {"e4m3": 1e-4, "e2m1": 6.0 * 2.0 ** -126}


def transform_sf(sf: torch.Tensor) -> torch.Tensor:
    """Any sf layout -> FP32 values with the logical block shape; packed UE8M0 words (int32 quads, the
    CUDA form, or int16 pairs, the Ascend form) are unpacked into one scale per byte (so the column
    count grows by the bytes per word, extra columns being padding)."""
    if sf.dtype == torch.float32:
        return sf
    if sf.dtype not in (torch.int32, torch.int16):
        raise TypeError(f"sf: expected dtype torch.float32, torch.int32 or torch.int16 (packed UE8M0), got {sf.dtype}")
    rows, words = sf.shape
    # Each word holds consecutive UE8M0 bytes (low byte first) for one row.
    # contiguous() keeps odd strides on size-1 dims; as_strided pins the row-major layout.
    b = sf.contiguous().as_strided((rows, words), (words, 1)).view(torch.uint8).view(rows, words * sf.element_size())
    return b.view(torch.float8_e8m0fnu).float()  # UE8M0: 0xFF is NaN, 0x00 is 2^-127


def dequantize(q: torch.Tensor, sf: torch.Tensor, block_size: tuple[int, int]) -> torch.Tensor:
    """FP32 ``decode(q) * sf`` with sf broadcast over its blocks."""
    values = unpack_from_e2m1fn_x2(q) if q.dtype == torch.int8 else q.to(torch.float32)
    s = transform_sf(sf).repeat_interleave(block_size[0], 0).repeat_interleave(block_size[1], 1)
    return values * s[: values.shape[0], : values.shape[1]]


def cast_back(x: QuantTensor, fmt: str, block_size: tuple[int, int] = (32, 32)) -> torch.Tensor:
    q, sf = x
    if q.dtype not in (torch.float8_e4m3fn, torch.int8):
        raise TypeError(f"x[0]: expected dtype torch.float8_e4m3fn or torch.int8 (packed FP4), got {q.dtype}")
    return dequantize(q, sf, block_size).to(torch.float32 if fmt == "fp32" else torch.bfloat16)


def _block_view(t: torch.Tensor, bm: int, bk: int) -> torch.Tensor:
    """(M, K) zero-padded to the block grid -> (Mb, Kb, bm * bk)."""
    m, k = t.shape
    t = F.pad(t, (0, (-k) % bk, 0, (-m) % bm))
    mb, kb = t.shape[0] // bm, t.shape[1] // bk
    return t.view(mb, bm, kb, bk).permute(0, 2, 1, 3).reshape(mb, kb, bm * bk)


def scale_factors(xf: torch.Tensor, fmt: str, block_size: tuple[int, int], round_sf: bool,
                  clamp_min: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(sf, sf_inv), both FP32 ``(Mb, Kb)``: the dequant scale and the multiplier that quantises."""
    amax = _block_view(xf.abs(), *block_size).amax(-1)  # zero padding never exceeds |x|
    amax = torch.clamp(amax, min=FMT_CLAMP_MIN[fmt] if clamp_min is None else clamp_min)
    fmt_max = torch.full_like(amax, FMT_MAX[fmt])
    sf = amax / fmt_max
    if round_sf:
        sf = ceil_pow2_bits(sf).view(torch.float32)
        sf_inv = torch.where(sf == 0, torch.zeros_like(sf), 1.0 / sf)
    else:
        sf_inv = torch.where(sf == 0, torch.zeros_like(sf), fmt_max / amax)
    return sf, sf_inv


def quantize(xf: torch.Tensor, sf_inv: torch.Tensor, fmt: str, block_size: tuple[int, int]) -> torch.Tensor:
    m, k = xf.shape
    inv = sf_inv.repeat_interleave(block_size[0], 0).repeat_interleave(block_size[1], 1)[:m, :k]
    scaled = xf * inv
    if fmt == "e4m3":
        return torch.clamp(scaled, -448.0, 448.0).to(torch.float8_e4m3fn)
    return pack_e2m1(e2m1_encode(scaled))


def format_sf(sf: torch.Tensor, use_tma_aligned_col_major_sf: bool, use_packed_ue8m0: bool) -> torch.Tensor:
    """FP32 ``(Mb, Kb)`` scales -> the requested layout.

    col-major: FP32 ``(Mb, Kb)`` view of storage ``(Kb, align(Mb, 4))``;
    packed UE8M0: int32 ``(Mb, ceil(Kb/4))`` view of storage ``(ceil(Kb/4), align(Mb, 4))``, byte j
    of word i holding the biased exponent of block 4i + j."""
    mb, kb = sf.shape
    if not use_tma_aligned_col_major_sf:
        return sf.contiguous()
    if use_packed_ue8m0:
        exps = ((sf.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
        exps = F.pad(exps, (0, (-kb) % 4))
        words = exps.view(torch.int32) if mb > 0 else torch.empty((0, ceil_div(kb, 4)), dtype=torch.int32, device=sf.device)
    else:
        words = sf
    storage = torch.zeros((words.shape[1], align(mb, 4)), dtype=words.dtype, device=sf.device)
    storage[:, :mb] = words.T
    return storage.T[:mb]


def cast(x: Union[torch.Tensor, QuantTensor], fmt: str, block_size: tuple[int, int] = (32, 32),
         sf: torch.Tensor | None = None, x_block_size: tuple[int, int] | None = None, round_sf: bool = False,
         use_tma_aligned_col_major_sf: bool = False, use_packed_ue8m0: bool = False,
         clamp_min: float | None = None) -> Union[torch.Tensor, QuantTensor]:
    """Quantise a 2-D tensor (or re-quantise a QuantTensor) with block-shared scales.

    With ``sf`` given (FP32 ``(Mb, Kb)`` dequant scales) the data is quantised with ``1/sf`` and
    only the data is returned."""
    if isinstance(x, tuple):
        xf = dequantize(x[0], x[1], x_block_size)
    else:
        if x.dtype not in (torch.bfloat16, torch.float32):
            raise TypeError(f"x: expected dtype torch.bfloat16 or torch.float32, got {x.dtype}")
        xf = x.to(torch.float32)
    if fmt not in FMT_DTYPE:
        raise ValueError(f"fmt: expected 'e4m3' or 'e2m1', got {fmt!r}")
    m, k = xf.shape
    if sf is not None:
        return quantize(xf, sf.reciprocal(), fmt, block_size)
    if m == 0:
        q = torch.empty((0, k // 2 if fmt == "e2m1" else k), dtype=FMT_DTYPE[fmt], device=xf.device)
        s = torch.empty((0, ceil_div(k, block_size[1])), dtype=torch.float32, device=xf.device)
        return q, format_sf(s, use_tma_aligned_col_major_sf, use_packed_ue8m0)
    s, s_inv = scale_factors(xf, fmt, block_size, round_sf, clamp_min)
    return quantize(xf, s_inv, fmt, block_size), format_sf(s, use_tma_aligned_col_major_sf, use_packed_ue8m0)


def per_channel_cast_fused(x: Union[torch.Tensor, QuantTensor], num_per_tokens: int, num_per_channels: int | None,
                           round_sf: bool, pos_to_token: torch.Tensor | None) -> QuantTensor:
    """Per-channel ``(num_per_tokens, 1)`` E4M3 cast, optionally of a gathered/expanded copy of x
    (row p = x[pos_to_token[p]], zero where -1) and optionally re-scaling a QuantTensor input."""
    is_quant = isinstance(x, tuple)
    if pos_to_token is not None:
        valid = (pos_to_token >= 0).unsqueeze(1)
        idx = pos_to_token.clamp(min=0).long()
        data = x[0] if is_quant else x
        gathered = torch.where(valid, data[idx].to(torch.float32), torch.zeros((), device=data.device)).to(data.dtype)
        if is_quant:
            x = (gathered, torch.where(valid, x[1][idx], torch.zeros((), device=data.device)))
        else:
            x = gathered
    return cast(x, "e4m3", (num_per_tokens, 1), x_block_size=(1, num_per_channels) if is_quant else None,
                round_sf=round_sf)
