"""Upstream FlashMLA's comparison rule and tolerances, and the shared test-data builders."""
from __future__ import annotations

import torch

from flash_mla._operands import KVCacheFormat, _flat_bytes
from flash_mla.kv_cache import quantize_k_cache

# (abs, rel, cos-diff) per output, as upstream's tests use them.
DECODE_OUT = (1e-3, 2.01 / 128, 5e-6)
DECODE_LSE = (1e-6, 8.01 / 65536, None)
PREFILL_OUT = (8e-4, 3.01 / 128, 7e-6)
PREFILL_STAT = (1e-6, 2.01 / 65536, None)   # lse and max_logits
DENSE_OUT = (8e-4, 2.01 / 128, 5e-6)


def assert_close(ans: torch.Tensor, ref: torch.Tensor, tol: tuple, name: str) -> None:
    """Infinities and NaNs must coincide; every other element within abs OR rel; global cos-diff."""
    abs_tol, rel_tol, cos_tol = tol
    assert ans.shape == ref.shape, f"{name}: shape {tuple(ans.shape)} != {tuple(ref.shape)}"
    a, r = ans.detach().double(), ref.detach().double()
    for kind, fn in (("+inf", lambda x: x == float("inf")), ("-inf", lambda x: x == float("-inf")),
                     ("nan", torch.isnan)):
        mismatch = fn(a) != fn(r)
        assert not mismatch.any(), f"{name}: {kind} positions differ at {mismatch.nonzero()[:5].tolist()}"
    finite = torch.isfinite(r)
    a, r = torch.where(finite, a, 0.0), torch.where(finite, r, 0.0)
    err = (a - r).abs()
    bad = (err >= abs_tol) & (err / (r.abs() + 1e-6) >= rel_tol)
    assert not bad.any(), (f"{name}: {int(bad.sum())} elements out of tolerance, worst abs err {err.max().item():.3g} "
                           f"at {bad.nonzero()[0].tolist()}")
    if cos_tol is not None:
        denom = (a * a + r * r).sum()
        cos = float(1 - 2 * (a * r).sum() / denom) if denom > 0 else 0.0
        assert cos <= cos_tol, f"{name}: cos diff {cos:.3g} > {cos_tol:.3g}"


def make_cache(fmt: KVCacheFormat, num_blocks: int, page: int, placement=None, seed: int = 0,
               nan_fill: torch.Tensor | None = None) -> torch.Tensor:
    """A quantised cache of randn/10 values (clamped to +-1), blocks padded by 32 bytes so that
    stride(0) != page * bytes_per_token. ``nan_fill``: physical slot ids whose bytes become 0xFF
    (NaN data and scales) to prove unreferenced slots never leak."""
    g = torch.Generator().manual_seed(seed)
    k = (torch.randn(num_blocks, page, 1, fmt.d_qk, generator=g) / 10).clamp(-1, 1).bfloat16()
    cache = quantize_k_cache(k, fmt, placement, block_stride=page * fmt.bytes_per_token + 32)
    if nan_fill is not None and nan_fill.numel():
        poison_slots(cache, fmt, placement, nan_fill)
    return cache


def poison_slots(cache: torch.Tensor, fmt: KVCacheFormat, placement, slots: torch.Tensor) -> None:
    s = fmt.spec
    placement = fmt.placement(placement)
    flat = _flat_bytes(cache)
    p = cache.shape[1]
    for t in slots.tolist():
        base = (t // p) * cache.stride(0)
        slot = t % p
        if placement == "interleaved":
            flat[base + slot * s.bytes_per_token: base + (slot + 1) * s.bytes_per_token] = 0xFF
        else:
            flat[base + slot * s.data_bytes: base + (slot + 1) * s.data_bytes] = 0xFF
            off = base + p * s.data_bytes + slot * s.scale_bytes
            flat[off: off + s.scale_bytes] = 0xFF
