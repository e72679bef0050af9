"""Quantised paged KV-cache formats: byte layouts, quantise / dequantise helpers, relayout.

A cache is viewed as ``[num_blocks, page_block_size, 1, bytes_per_token]`` of 1-byte elements;
token ``t = block * page_block_size + slot``. Two placements exist:

- ``"interleaved"``: each token's record is ``[data | scales]`` (V3.2 always, and the V4.1
  formats in the Ascend release, the current upstream default);
- ``"block_split"``: a page block holds all its tokens' data rows, then all their scale rows
  (MODEL1 / V4 always, V4.1 in its first release). The per-token ``[.., P, 1, bpt]`` view is
  then only a view: addresses come from the block base.

| format      | bpt | d   | data                                   | scales                        |
|-------------|-----|-----|----------------------------------------|-------------------------------|
| V32_FP8     | 656 | 576 | 512 e4m3 NoPE, then 64 bf16 RoPE*      | 4 fp32, one per 128 dims      |
| MODEL1_FP8  | 584 | 512 | 448 e4m3 NoPE + 64 bf16 RoPE (576 B)   | 7 e8m0 per 64 dims + 1 pad    |
| V41_FP8     | 528 | 512 | 512 e4m3                               | 16 e8m0, one per 32 dims      |
| V41_FP4     | 288 | 512 | 512 e2m1, two per byte, low nibble 1st | 32 e4m3, one per 16 dims      |

(*) V3.2 stores its scales between the NoPE bytes and the RoPE part: 512 | 16 | 128.
Dequantised values are ``bf16(float(q) * float(scale))``; every scale except V3.2's is a power
of two or an e4m3 value, so the product is exact.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

PLACEMENTS = ("interleaved", "block_split")
E4M3_MAX = 448.0
E2M1_MAX = 6.0


@dataclass(frozen=True)
class FormatSpec:
    bytes_per_token: int
    d_qk: int          # dims a token holds (QK uses all of them)
    d_quant: int       # leading dims stored quantised
    tile: int          # dims per scale
    data_bytes: int    # bytes of a token's data row (quantised part + any bf16 part)
    scale_bytes: int   # bytes of a token's scale row (incl. padding)
    fixed_placement: str | None  # None: both placements exist
    code: int          # format id the host kernels use


class KVCacheFormat(enum.Enum):
    V32_FP8 = FormatSpec(656, 576, 512, 128, 512 + 128, 16, "interleaved", 0)
    MODEL1_FP8 = FormatSpec(584, 512, 448, 64, 576, 8, "block_split", 1)
    V41_FP8 = FormatSpec(528, 512, 512, 32, 512, 16, None, 2)
    V41_FP4 = FormatSpec(288, 512, 512, 16, 256, 32, None, 3)

    @property
    def spec(self) -> FormatSpec:
        return self.value

    @property
    def bytes_per_token(self) -> int:
        return self.value.bytes_per_token

    @property
    def d_qk(self) -> int:
        return self.value.d_qk

    @property
    def num_tiles(self) -> int:
        return self.value.d_quant // self.value.tile

    @classmethod
    def from_bytes_per_token(cls, bpt: int, name: str = "k_cache") -> KVCacheFormat:
        for f in cls:
            if f.bytes_per_token == bpt:
                return f
        raise ValueError(f"{name}: bytes_per_token (last dim) must be one of "
                         f"{', '.join(str(f.bytes_per_token) for f in cls)} (V3.2, MODEL1, V4.1 FP8, V4.1 FP4), got {bpt}")

    def placement(self, requested: str | None = None) -> str:
        """The placement of this format; V4.1 defaults to the Ascend token-interleaved one."""
        fixed = self.value.fixed_placement
        if requested is None:
            return fixed or "interleaved"
        if requested not in PLACEMENTS:
            raise ValueError(f"kv_layout must be one of {PLACEMENTS}, got {requested!r}")
        if fixed is not None and requested != fixed:
            raise ValueError(f"kv_layout: the {self.name} format is always {fixed!r}, got {requested!r}")
        return requested


def _as_format(fmt) -> KVCacheFormat:
    if isinstance(fmt, KVCacheFormat):
        return fmt
    if isinstance(fmt, str):
        try:
            return KVCacheFormat[fmt]
        except KeyError:
            pass
    raise ValueError(f"kv format must be a KVCacheFormat or one of {[f.name for f in KVCacheFormat]}, got {fmt!r}")


# ---- scale rules ------------------------------------------------------------------------------

def pow2_scale(amax: torch.Tensor) -> torch.Tensor:
    """``2 ** ceil(log2(max(amax / 448, 1e-4)))`` computed exactly (frexp, not a rounded log2)."""
    v = torch.clamp_min(amax.float() / E4M3_MAX, 1e-4)
    mantissa, exponent = torch.frexp(v)          # v = mantissa * 2**exponent, mantissa in [0.5, 1)
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    return torch.ldexp(torch.ones_like(v), exponent)


def _e8m0_byte(pow2: torch.Tensor) -> torch.Tensor:
    return ((pow2.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)


def _e8m0_decode(b: torch.Tensor) -> torch.Tensor:
    return b.contiguous().view(torch.float8_e8m0fnu).float()


def _e4m3_decode(b: torch.Tensor) -> torch.Tensor:
    return b.contiguous().view(torch.float8_e4m3fn).float()


def _e4m3_encode(x: torch.Tensor) -> torch.Tensor:
    return x.float().to(torch.float8_e4m3fn).view(torch.uint8)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """FP32 -> E2M1 codes (uint8, bit 3 = sign): nearest, ties to even, saturating at 6, NaN -> 0."""
    a = x.abs()
    a = torch.where(torch.isnan(a), torch.zeros_like(a), a)
    code = ((a > 0.25).to(torch.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5) + (a > 5.0))
    sign = (torch.signbit(x) & ~torch.isnan(x)).to(torch.uint8) << 3
    return code.to(torch.uint8) | sign


_E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    return _E2M1_VALUES.to(codes.device)[codes.long() & 0xF]


# ---- per-token records ([n, bpt] uint8 in interleaved order) ----------------------------------

def quantize_records(k: torch.Tensor, fmt: KVCacheFormat) -> torch.Tensor:
    """``k`` [n, d] (any float dtype, bf16 values expected) -> [n, bpt] uint8 records."""
    s = fmt.spec
    n = k.shape[0]
    x = k.float()
    out = torch.zeros(n, s.bytes_per_token, dtype=torch.uint8, device=k.device)
    tiles = x[:, :s.d_quant].reshape(n, fmt.num_tiles, s.tile)
    amax = tiles.abs().amax(dim=-1)                       # [n, tiles]
    if fmt is KVCacheFormat.V41_FP4:
        scale = _e4m3_decode(_e4m3_encode(torch.clamp(amax / E2M1_MAX, min=2.0 ** -9, max=E4M3_MAX)))
        codes = e2m1_encode(tiles / scale.unsqueeze(-1)).reshape(n, s.d_quant)
        out[:, :256] = codes[:, 0::2] | (codes[:, 1::2] << 4)
        out[:, 256:288] = _e4m3_encode(scale)
        return out
    scale = pow2_scale(amax)
    out[:, :s.d_quant] = _e4m3_encode(tiles / scale.unsqueeze(-1)).reshape(n, s.d_quant)
    if fmt is KVCacheFormat.V32_FP8:
        out[:, 512:528] = scale.contiguous().view(torch.uint8).reshape(n, 16)
        out[:, 528:656] = k[:, 512:].to(torch.bfloat16).contiguous().view(torch.uint8).reshape(n, 128)
    elif fmt is KVCacheFormat.MODEL1_FP8:
        out[:, 448:576] = k[:, 448:].to(torch.bfloat16).contiguous().view(torch.uint8).reshape(n, 128)
        out[:, 576:583] = _e8m0_byte(scale)
    else:  # V41_FP8
        out[:, 512:528] = _e8m0_byte(scale)
    return out


def dequantize_records(rec: torch.Tensor, fmt: KVCacheFormat) -> torch.Tensor:
    """[n, bpt] uint8 records -> [n, d] bf16."""
    s = fmt.spec
    n = rec.shape[0]
    rec = rec.contiguous()
    if fmt is KVCacheFormat.V41_FP4:
        packed = rec[:, :256]
        codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(n, 512)
        scale = _e4m3_decode(rec[:, 256:288])
        vals = e2m1_decode(codes).reshape(n, 32, 16) * scale.unsqueeze(-1)
        return vals.reshape(n, 512).to(torch.bfloat16)
    q = _e4m3_decode(rec[:, :s.d_quant]).reshape(n, fmt.num_tiles, s.tile)
    if fmt is KVCacheFormat.V32_FP8:
        scale = rec[:, 512:528].contiguous().view(torch.float32)
        rope = rec[:, 528:656].contiguous().view(torch.bfloat16)
    elif fmt is KVCacheFormat.MODEL1_FP8:
        scale = _e8m0_decode(rec[:, 576:583])
        rope = rec[:, 448:576].contiguous().view(torch.bfloat16)
    else:
        scale = _e8m0_decode(rec[:, 512:528])
        rope = None
    nope = (q * scale.unsqueeze(-1)).reshape(n, s.d_quant).to(torch.bfloat16)
    return nope if rope is None else torch.cat([nope, rope], dim=1)


# ---- whole caches -----------------------------------------------------------------------------

def _cache_bytes(cache: torch.Tensor) -> torch.Tensor:
    if cache.dtype not in (torch.uint8, torch.int8, torch.float8_e4m3fn):
        raise TypeError(f"k_cache: dtype must be float8_e4m3fn, int8 or uint8, got {cache.dtype}")
    return cache.view(torch.uint8)


def _flat_bytes(cache: torch.Tensor) -> torch.Tensor:
    """Every byte from the first block's base to the end of the last block, as a 1-D view."""
    c = _cache_bytes(cache)
    nb, p = c.shape[0], c.shape[1]
    total = (nb - 1) * c.stride(0) + p * c.shape[-1] if nb > 0 else 0
    return c.as_strided((total,), (1,))


def gather_records(cache: torch.Tensor, fmt: KVCacheFormat, placement: str, token_ids: torch.Tensor) -> torch.Tensor:
    """The records ([n, bpt] uint8, interleaved order) of physical tokens ``token_ids`` (all valid)."""
    s = fmt.spec
    p = cache.shape[1]
    flat = _flat_bytes(cache)
    ids = token_ids.reshape(-1).long()
    blk, slot = ids // p, ids % p
    base = blk * cache.stride(0)
    if placement == "interleaved":
        offs = (base + slot * s.bytes_per_token).unsqueeze(1) + torch.arange(s.bytes_per_token, device=ids.device)
        return flat[offs]
    data = (base + slot * s.data_bytes).unsqueeze(1) + torch.arange(s.data_bytes, device=ids.device)
    scales = (base + p * s.data_bytes + slot * s.scale_bytes).unsqueeze(1) + torch.arange(s.scale_bytes, device=ids.device)
    return torch.cat([flat[data], flat[scales]], dim=1)


def _infer(cache: torch.Tensor, fmt, placement: str | None) -> tuple[KVCacheFormat, str]:
    fmt = KVCacheFormat.from_bytes_per_token(cache.shape[-1]) if fmt is None else _as_format(fmt)
    if cache.shape[-1] != fmt.bytes_per_token:
        raise ValueError(f"k_cache: {fmt.name} needs bytes_per_token {fmt.bytes_per_token}, got {cache.shape[-1]}")
    return fmt, fmt.placement(placement)


def quantize_k_cache(k_cache: torch.Tensor, kv_format, placement: str | None = None,
                     block_stride: int | None = None) -> torch.Tensor:
    """Quantise a bf16 cache ``[num_blocks, page_block_size, 1, d]`` (or without the head axis).

    Returns a ``float8_e4m3fn`` view ``[num_blocks, page_block_size, 1, bytes_per_token]``.
    ``block_stride`` (bytes, >= page_block_size * bytes_per_token) pads each page block, as the
    upstream tests do to exercise ``stride(0)``; padding bytes are left zero."""
    fmt = _as_format(kv_format)
    placement = fmt.placement(placement)
    k = k_cache.squeeze(2) if k_cache.dim() == 4 else k_cache
    if k.dim() != 3 or k.shape[-1] != fmt.d_qk:
        raise ValueError(f"k_cache: expected [num_blocks, page_block_size, 1, {fmt.d_qk}], got {tuple(k_cache.shape)}")
    nb, p, _ = k.shape
    s = fmt.spec
    rec = quantize_records(k.reshape(nb * p, fmt.d_qk), fmt).reshape(nb, p, s.bytes_per_token)
    stride = block_stride if block_stride is not None else p * s.bytes_per_token
    if stride < p * s.bytes_per_token:
        raise ValueError(f"block_stride must be >= {p * s.bytes_per_token}, got {stride}")
    buf = torch.zeros(nb, stride, dtype=torch.uint8, device=k.device)
    if placement == "interleaved":
        buf[:, :p * s.bytes_per_token] = rec.reshape(nb, -1)
    else:
        buf[:, :p * s.data_bytes] = rec[:, :, :s.data_bytes].reshape(nb, -1)
        buf[:, p * s.data_bytes:p * s.bytes_per_token] = rec[:, :, s.data_bytes:].reshape(nb, -1)
    view = buf.as_strided((nb, p, 1, s.bytes_per_token), (stride, s.bytes_per_token, s.bytes_per_token, 1))
    return view.view(torch.float8_e4m3fn)


def dequantize_k_cache(quant_k_cache: torch.Tensor, kv_format=None, placement: str | None = None) -> torch.Tensor:
    """``[num_blocks, page_block_size, 1, bytes_per_token]`` -> bf16 ``[num_blocks, page_block_size, 1, d]``.
    The format is inferred from ``bytes_per_token`` when not given (V4.1 placement: interleaved)."""
    fmt, placement = _infer(quant_k_cache, kv_format, placement)
    nb, p = quant_k_cache.shape[0], quant_k_cache.shape[1]
    ids = torch.arange(nb * p, device=quant_k_cache.device)
    out = dequantize_records(gather_records(quant_k_cache, fmt, placement, ids), fmt)
    return out.reshape(nb, p, 1, fmt.d_qk)


def convert_kv_layout(quant_k_cache: torch.Tensor, to: str, kv_format=None) -> torch.Tensor:
    """Rewrite a V4.1 cache between the ``"block_split"`` and ``"interleaved"`` placements
    (byte-exact, same format, compact blocks)."""
    fmt = KVCacheFormat.from_bytes_per_token(quant_k_cache.shape[-1]) if kv_format is None else _as_format(kv_format)
    if fmt.spec.fixed_placement is not None:
        raise ValueError(f"quant_k_cache: {fmt.name} has a fixed placement; only V4.1 caches can be converted")
    if to not in PLACEMENTS:
        raise ValueError(f"to must be one of {PLACEMENTS}, got {to!r}")
    _cache_bytes(quant_k_cache)  # the dtype
    bpt = fmt.bytes_per_token
    c = quant_k_cache
    if c.dim() != 4 or c.shape[2] != 1 or c.shape[3] != bpt or c.stride(-1) != 1 or c.stride(1) != bpt \
            or (c.shape[0] > 1 and c.stride(0) < c.shape[1] * bpt):
        raise ValueError(f"quant_k_cache: expected [num_blocks, page_block_size, 1, {bpt}] with compact tokens "
                         f"in non-overlapping blocks, got shape {tuple(c.shape)} strides {c.stride()}")
    from . import _dispatch
    return _dispatch.run("convert_kv_layout", quant_k_cache.device, quant_k_cache, fmt, to)


def relayout_reference(quant_k_cache: torch.Tensor, fmt: KVCacheFormat, to: str) -> torch.Tensor:
    """``convert_kv_layout`` on validated arguments, in plain PyTorch (the oracle of the host kernel)."""
    source = "interleaved" if to == "block_split" else "block_split"
    nb, p = quant_k_cache.shape[0], quant_k_cache.shape[1]
    s = fmt.spec
    rec = gather_records(quant_k_cache, fmt, source, torch.arange(nb * p, device=quant_k_cache.device))
    rec = rec.reshape(nb, p, s.bytes_per_token)
    if to == "interleaved":
        buf = rec.reshape(nb, p * s.bytes_per_token)
    else:
        buf = torch.cat([rec[:, :, :s.data_bytes].reshape(nb, -1), rec[:, :, s.data_bytes:].reshape(nb, -1)], dim=1)
    return buf.contiguous().view(nb, p, 1, s.bytes_per_token).view(quant_k_cache.dtype)


def abs_indices_to_indices_in_kvcache(abs_indices: torch.Tensor, block_table: torch.Tensor,
                                      block_size: int) -> torch.Tensor:
    """Logical positions ``[b, s_q, topk]`` (-1 invalid) -> physical slot ids through ``block_table``."""
    b = abs_indices.shape[0]
    invalid = abs_indices < 0
    pos = torch.where(invalid, torch.zeros_like(abs_indices), abs_indices).long()
    blocks = torch.gather(block_table.long(), 1, (pos // block_size).reshape(b, -1)).reshape(pos.shape)
    ids = blocks * block_size + pos % block_size
    return torch.where(invalid, torch.full_like(ids, -1), ids).to(torch.int32)


__all__ = ["KVCacheFormat", "PLACEMENTS", "quantize_k_cache", "dequantize_k_cache", "convert_kv_layout",
           "gather_records", "quantize_records", "dequantize_records", "abs_indices_to_indices_in_kvcache",
           "pow2_scale", "e2m1_encode", "e2m1_decode"]
