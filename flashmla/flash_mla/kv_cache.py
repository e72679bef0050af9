"""Public KV-cache helpers: quantise / dequantise a whole paged cache, convert a V4.1 cache between
its placements, and map logical token positions through a block table. The byte formats themselves
live in ``_operands``."""
from __future__ import annotations

import torch

from deepjit import validation as V

from . import _dispatch
from ._operands import (  # noqa: F401  (re-exported: the formats' public home is flash_mla.kv_cache)
    PLACEMENTS,
    KVCacheFormat,
    _as_format,
    _cache_bytes,
    dequantize_records,
    e2m1_decode,
    e2m1_encode,
    gather_records,
    pow2_scale,
    quantize_records,
)


def _infer(cache: torch.Tensor, fmt, placement: str | None) -> tuple[KVCacheFormat, str]:
    fmt = KVCacheFormat.from_bytes_per_token(cache.shape[-1]) if fmt is None else _as_format(fmt)
    if cache.shape[-1] != fmt.bytes_per_token:
        raise V.fail("k_cache", f"bytes_per_token {fmt.bytes_per_token} for {fmt.name}", cache.shape[-1])
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
        raise V.fail("block_stride", f"a value >= {p * s.bytes_per_token}", stride)
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
        raise V.fail("to", f"one of {PLACEMENTS}", repr(to))
    _cache_bytes(quant_k_cache)  # the dtype
    bpt = fmt.bytes_per_token
    c = quant_k_cache
    if c.dim() != 4 or c.shape[2] != 1 or c.shape[3] != bpt or c.stride(-1) != 1 or c.stride(1) != bpt \
            or (c.shape[0] > 1 and c.stride(0) < c.shape[1] * bpt):
        raise ValueError(f"quant_k_cache: expected [num_blocks, page_block_size, 1, {bpt}] with compact tokens "
                         f"in non-overlapping blocks, got shape {tuple(c.shape)} strides {c.stride()}")
    return _dispatch.run("convert_kv_layout", quant_k_cache.device, quant_k_cache, fmt, to)



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
