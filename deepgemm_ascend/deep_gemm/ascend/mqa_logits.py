"""Ascend MQA logits over a contiguous KV (the lightning indexer's prefill form): the mixed kernel
``mqa_logits.asc`` behind ``fp8_mqa_logits`` / ``fp8_fp4_mqa_logits``.

Entry point (for the dispatch table's Ascend column; the canonical arguments of
``deep_gemm.reference.mqa_logits``, already validated by ``deep_gemm.attention``)::

    mqa_logits(q, kv, weights, ks, ke, logits, compressed, clean_logits) -> None

- ``q``: E4M3 ``[S, H, D]`` (``H <= 128``, ``D`` in 32/64/128; 64/128 with any per-32 scales: the MX
  product's K step is 64), unscaled or with per-32 UE8M0 scales;
  ``kv``: E4M3 ``[S_kv, D]`` with one FP32 scale per token or per-32 UE8M0 scales. Unscaled q over
  per-token scales runs ``asc_mmad``; any per-32 scales (DeepGEMM-Ascend's MXFP8 form: both) run
  ``asc_mmad_mx`` (``DG_MX``) with the scales re-packed on the device into int16 pairs, MN-major (the
  side without per-32 scales gets 2^0), a per-token KV scale still applied by the vector cores. ``weights`` ``[S, H]`` (FP32 or BF16, read as FP32); ``ks``/``ke``
  int32 ``[S]`` device tensors, read by the kernel only (no host read: the ranges are clamped to
  ``[0, S_kv)`` in the kernel).
- ``logits`` ``[S, width]`` FP32 or BF16 (``stride(1) == 1``), written in place inside each row's
  ``[ks, ke)``; with ``clean_logits`` every other column is -inf, without it untouched. Compressed
  rows hold position ``ks[i] + t`` in column ``t``.
- FP4: packed E2M1 q ``[S, H, D/2]`` and KV ``[S_kv, D/2]`` (``D`` 64/128), each with per-32 scales, through
  the same MX product on E2M1 (``DG_QK_FP4``).
- Other forms (head shapes past these) are not served here: the dispatch table's
  ``accepts`` (``unsupported``, which names why) sends them to the reference; called directly,
  ``mqa_logits`` raises ``NotImplementedError``.
"""
from __future__ import annotations

import torch

from .. import runtime
from ._launch import args, kernel, num_cube_cores
from .fp8_mx_gemm import ascend_scales, k_major_pairs, no_overlap

HEAD_DIMS = (32, 64, 128)
MAX_HEADS = 128
Q_ROWS, KV_BLOCK = 128, 256  # the tile of mqa_logits.h: (token, head) rows x KV positions


def tokens_per_tile(heads: int) -> int:
    return max(1, Q_ROWS // heads)


def head_dim_of(q) -> int:
    return q.data.size(-1) * (2 if q.fp4 else 1)


def unsupported_query(q, kv_fp4: bool, logits: torch.Tensor) -> str | None:
    """What both MQA logits kernels refuse (q ``[..., heads, head_dim]``), or None."""
    if q.fp4 != kv_fp4 or (not q.fp4 and q.data.dtype != torch.float8_e4m3fn):
        return "E4M3 FP8 or FP4 queries and KV, both alike"
    heads, head_dim = q.data.size(-2), head_dim_of(q)
    if head_dim not in HEAD_DIMS or heads > MAX_HEADS:
        return f"head dim in {HEAD_DIMS} and at most {MAX_HEADS} heads, got {heads} x {head_dim}"
    if logits.numel() and logits.stride(1) != 1:
        return "row-major logits"
    return None


MX_MIN_HEAD_DIM = 64  # one asc_mmad_mx K step: an L0 MX scale fractal holds 2 UE8M0 (64 K-elements) a row


def uses_mx(q, kv) -> bool:
    """Whether the contiguous form runs the MX product: any per-32 scales (FP4 has them on both)."""
    return q.has_sf or not kv.per_token_sf


def unsupported(q, kv, weights, logits) -> str | None:
    reason = unsupported_query(q, kv.fp4, logits)
    if reason is None and uses_mx(q, kv) and head_dim_of(q) < MX_MIN_HEAD_DIM:
        # CANN's MX matmuls pad K to 64 (asc_copy_l12l0a_mx moves scales in (16, 2, 16) fractals; ops-tensor
        # "Block Mmad Mx": K aligned to MXFP_DIVISOR_SIZE = 64); the asc_mmad_mx page states no K = 32 form
        reason = f"per-32 scales (the MX product) at head dim >= {MX_MIN_HEAD_DIM}, got {head_dim_of(q)}"
    return reason


def data(op) -> torch.Tensor:
    """An operand's values as the kernels read them (packed FP4 as bytes)."""
    return op.data.view(torch.uint8) if op.fp4 else op.data


def mx_pairs(op, rows: int, head_dim: int) -> tuple[torch.Tensor, int, bool]:
    """(int16 UE8M0 pairs, ld, K-major) of an MQA operand's per-32 scales as the MX kernels read them: the caller's
    packed rows where they lie (``packed_sf`` ``[rows, words]``, D a multiple of 64: ``load_sf_nz<true>``), else
    ``op.sf`` ``[.., D/32]`` (2^0 where it has none or one per token) converted to pairs ``[rows, ceil(D/64)]``,
    MN-major."""
    p = op.packed_sf
    t = k_major_pairs(p) if p is not None and head_dim % 64 == 0 and no_overlap(p) else None
    if t is not None:
        return t, t.stride(0), True
    if not op.has_sf or op.per_token_sf:
        sf = torch.ones(rows, -(-head_dim // 32), device=op.data.device)
    else:
        sf = op.sf.reshape(rows, -1)
    t = ascend_scales(sf, rows, head_dim)
    return t, t.stride(-1), False


def k_major_flags(**operands: bool) -> dict[str, bool]:
    """The ``<operand>_sf_k_major`` flags that are set (unset ones keep the kernels' default and cache key)."""
    return {f"{name}_sf_k_major": True for name, k_major in operands.items() if k_major}


def defines(heads: int, head_dim: int, logits: torch.Tensor, **flags: bool) -> dict[str, int]:
    return {"DG_HEADS": heads, "DG_HEAD_DIM": head_dim, "DG_LOGITS_FP32": int(logits.dtype == torch.float32),
            **{f"DG_{name.upper()}": int(value) for name, value in flags.items()}}


def mqa_logits(q, kv, weights: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor, logits: torch.Tensor,
               compressed: bool, clean_logits: bool) -> None:
    reason = unsupported(q, kv, weights, logits)
    if reason:
        raise NotImplementedError(f"fp8_mqa_logits on Ascend: {reason}")
    seq_len, heads, head_dim = *q.data.shape[:2], head_dim_of(q)
    seq_len_kv = kv.data.size(0)
    if seq_len == 0 or logits.size(1) == 0:
        return
    if seq_len_kv == 0:
        if clean_logits:
            logits.fill_(float("-inf"))
        return
    tiles = -(-seq_len // tokens_per_tile(heads)) * -(-seq_len_kv // KV_BLOCK)
    mx = uses_mx(q, kv)
    kv_sf = kv.sf.float().contiguous() if kv.per_token_sf else weights  # placeholder: not read
    none = (ks, 0, False)  # placeholders: not read
    q_mx, ld_q, q_k_major = mx_pairs(q, seq_len * heads, head_dim) if mx else none
    kv_mx, ld_kv, kv_k_major = mx_pairs(kv, seq_len_kv, head_dim) if mx else none
    kernel("dg_fp8_mqa_logits", "ascend/mqa_logits.asc",
           defines(heads, head_dim, logits, clean=clean_logits, compressed=compressed, mx=mx,
                   kv_token_sf=kv.per_token_sf, qk_fp4=q.fp4, **k_major_flags(q=q_k_major, kv=kv_k_major)))(
        min(tiles, runtime.ascend_blocks(num_cube_cores(logits))),
        args("DgMqaLogitsArgs", q=data(q), kv=data(kv), kv_sf=kv_sf, q_mx_sf=q_mx, kv_mx_sf=kv_mx,
             weights=weights.float().contiguous(), ks=ks, ke=ke, logits=logits, seq_len=seq_len,
             seq_len_kv=seq_len_kv, width=logits.size(1), ld_logits=logits.stride(0),
             ld_q_mx_sf=ld_q, ld_kv_mx_sf=ld_kv))
