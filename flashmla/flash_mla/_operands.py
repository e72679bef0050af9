"""Quantised paged KV-cache formats: byte layouts and the per-token record codecs.

The bottom layer of flash_mla: the public cache helpers (``kv_cache``), the reference, host and
Ascend kernels all read formats, records and ``KVScope`` from here, and this module imports nothing
of the package.

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

from deepjit import validation as V

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
        raise V.fail(name, "bytes_per_token (last dim) one of " + ", ".join(str(f.bytes_per_token) for f in cls)
                     + " (V3.2, MODEL1, V4.1 FP8, V4.1 FP4)", bpt)

    def placement(self, requested: str | None = None) -> str:
        """The placement of this format; V4.1 defaults to the Ascend token-interleaved one."""
        fixed = self.value.fixed_placement
        if requested is None:
            return fixed or "interleaved"
        if requested not in PLACEMENTS:
            raise V.fail("kv_layout", f"one of {PLACEMENTS}", repr(requested))
        if fixed is not None and requested != fixed:
            raise V.fail("kv_layout", f"{fixed!r} (the {self.name} format has one placement)", repr(requested))
        return requested


def _as_format(fmt) -> KVCacheFormat:
    if isinstance(fmt, KVCacheFormat):
        return fmt
    if isinstance(fmt, str):
        try:
            return KVCacheFormat[fmt]
        except KeyError:
            pass
    raise V.fail("kv_format", f"a KVCacheFormat or one of {[f.name for f in KVCacheFormat]}", repr(fmt))


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
        raise V.fail("k_cache", "dtype torch.float8_e4m3fn, torch.int8 or torch.uint8", cache.dtype, TypeError)
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


@dataclass
class KVScope:
    """One quantised cache and the tokens a decode step reads from it."""
    cache: torch.Tensor             # [num_blocks, page_block_size, 1, bytes_per_token]
    fmt: KVCacheFormat
    placement: str
    indices: torch.Tensor           # [b, s_q, topk] physical slot ids, negative = invalid
    topk_length: torch.Tensor | None = None   # [b]

