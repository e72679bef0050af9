"""Ascend MQA logits over the fused paged KV cache (the lightning indexer's decode form): the mixed
kernel ``paged_mqa_logits.asc`` behind ``fp8_paged_mqa_logits`` / ``fp8_fp4_paged_mqa_logits``.

Entry point (for the dispatch table's Ascend column; the canonical arguments of
``deep_gemm.reference.paged_mqa_logits``, already validated by ``deep_gemm.attention``)::

    paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, logits, clean_logits) -> None

- ``q``: E4M3 ``[B, next_n, H, D]`` (``H <= 128``, ``D`` in 32/64/128); ``kv_cache`` a ``PagedKV``:
  q over the uint8 cache ``[num_pages, block_kv, 1, D + 4]`` (per page ``block_kv`` rows of
  values, then their FP32 scales; any page stride, a multiple of 4 bytes) — unscaled, or with per-32
  power-of-two scales (``D >= 64``) through the MX product with unit KV scales (``DG_KV_UNIT_SF``, the
  page's FP32 scale applied by the lanes after it) —, or DeepGEMM-Ascend's MXFP8
  form: q with per-32 UE8M0 scales over the MXFP8 cache ``[num_pages, block_kv, 1, D + D/32]`` (per
  page the values, then int16 scale pairs; row-major or, ``PagedKV.nz``, in the cube's fractal order),
  every scale applied by the cube (``asc_mmad_mx``, ``DG_MX``); or packed E2M1 q (per-32 scales) over
  the same MX cache holding E2M1 (``D/2 + D/32`` bytes a row, both page layouts) or over NVIDIA's FP4
  cache ``[num_pages, block_kv, 1, D/2 + 4]`` (values, then per token an int32 of four UE8M0: the
  row-major MX layout with 4 scale bytes per token; ``DG_QK_FP4``).
- ``context_lens`` int32 ``[B, next_n]`` (the public op turns upstream's 1-D ``[B]`` form into this on
  the device); ``block_table`` int32 ``[B, max_pages]``, row b serving every query row of entry b
  (with varlen ``indices`` each token is its own entry, as upstream indexes it). Both are read by the
  kernel only: lengths are clamped to the table's capacity and the logits width there, and page ids
  outside the cache are never dereferenced.
- ``logits`` ``[B * next_n, max_context_len]`` FP32 or BF16 (``stride(1) == 1``), written for the
  positions below each row's length; with ``clean_logits`` the rest of the row is -inf, without it
  untouched.
- Other forms (unscaled queries over the MX cache, other head shapes; ``unsupported`` names why) go to
  the reference through the table's ``accepts``; called directly, ``paged_mqa_logits`` raises
  ``NotImplementedError``.
"""
from __future__ import annotations

import torch

from .. import runtime
from ._launch import args, kernel, num_cube_cores
from .mqa_logits import (
    KV_BLOCK,
    MX_MIN_HEAD_DIM,
    data,
    defines,
    head_dim_of,
    k_major_flags,
    mx_pairs,
    tokens_per_tile,
    unsupported_query,
)


def unsupported(q, kv_cache, weights, context_lens, block_table, logits) -> str | None:
    if not q.fp4 and not q.has_sf and kv_cache.mx:
        return "per-32 query scales over the MXFP8 cache"
    if unit_kv_scales(q, kv_cache) and head_dim_of(q) < MX_MIN_HEAD_DIM:
        return f"per-32 query scales (the MX product) at head dim >= {MX_MIN_HEAD_DIM}, got {head_dim_of(q)}"
    return unsupported_query(q, kv_cache.fp4, logits)


def unit_kv_scales(q, kv_cache) -> bool:
    """Scaled E4M3 q over the fused FP32-scaled cache: the MX product with 2^0 KV scales."""
    return not q.fp4 and q.has_sf and not kv_cache.mx


def paged_mqa_logits(q, kv_cache, weights: torch.Tensor, context_lens: torch.Tensor, block_table: torch.Tensor,
                     logits: torch.Tensor, clean_logits: bool) -> None:
    reason = unsupported(q, kv_cache, weights, context_lens, block_table, logits)
    if reason:
        raise NotImplementedError(f"fp8_paged_mqa_logits on Ascend: {reason}")
    batch, next_n, heads, head_dim = *q.data.shape[:3], head_dim_of(q)
    width = logits.size(1)
    if batch == 0 or next_n == 0 or width == 0:
        return
    cache = kv_cache.cache
    num_pages, block_kv = cache.shape[:2]
    if num_pages == 0 or block_table.size(1) == 0:
        if clean_logits:
            logits.fill_(float("-inf"))
        return
    tiles = batch * -(-next_n // tokens_per_tile(heads)) * -(-width // KV_BLOCK)
    lens = context_lens.contiguous()
    unit = unit_kv_scales(q, kv_cache)
    mx = kv_cache.mx or q.fp4 or unit  # the FP4 cache's int32 words are 4 UE8M0 per token: two pairs, row-major
    q_mx, ld_q, q_k_major = mx_pairs(q, batch * next_n * heads, head_dim) if mx else (lens, 0, False)  # not read
    # 2^0 pairs for one page's rows, read as the MX cache's scale rows would be
    unit_sf = torch.full((block_kv, -(-head_dim // 64)), 0x7F7F, dtype=torch.int16, device=q.data.device) \
        if unit else lens  # placeholder: not read
    # NVIDIA's FP4 cache keeps 4 scale bytes per token at any D; the MX cache 2 * D/64 (the kernel's default)
    sf_row = {"DG_KV_SF_ROW_BYTES": 4} if q.fp4 and not kv_cache.mx else {}
    kernel("dg_fp8_paged_mqa_logits", "ascend/paged_mqa_logits.asc",
           {**defines(heads, head_dim, logits, clean=clean_logits, mx=mx, kv_nz=kv_cache.nz, qk_fp4=q.fp4,
                      **k_major_flags(q=q_k_major)),
            "DG_BLOCK_KV": block_kv, "DG_KV_UNIT_SF": int(unit), **sf_row})(
        min(tiles, runtime.ascend_blocks(num_cube_cores(logits))),
        args("DgPagedMqaLogitsArgs", q=data(q), cache=cache, q_mx_sf=q_mx, kv_unit_sf=unit_sf,
             weights=weights.float().contiguous(),
             context_lens=lens, block_table=block_table, logits=logits, batch=batch, next_n=next_n, width=width,
             ld_logits=logits.stride(0), bt_ld=block_table.stride(0), bt_cols=block_table.size(1),
             num_pages=num_pages, page_stride=cache.stride(0), ld_q_mx_sf=ld_q))
