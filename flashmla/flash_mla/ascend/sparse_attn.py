"""Launchers of ``sparse_mla.asc`` for the backend table's Ascend column.

``sparse_decode(q, scopes, sm_scale, d_v, attn_sink, enable_batch_invariant)`` and
``sparse_prefill(q, kv, indices, sm_scale, d_v, attn_sink, topk_length)`` take exactly the
arguments of the reference functions (already validated by ``flash_mla.interface``) and return
what the CPU path returns: decode ``out`` bf16 ``[b, s_q, h_q, 512]`` and ``lse`` fp32
``[b, h_q, s_q]`` (a transposed view of ``[b, s_q, h_q]``); prefill ``out`` ``[s_q, h_q, 512]``,
``max_logits`` and ``lse`` ``[s_q, h_q]``.

What the kernel covers (``decode_accepts`` / ``prefill_accepts``): ``d_qk`` 512 or 576 (one kernel
build each), ``d_v`` 512, ``h_q`` a multiple of 16 up to 64 or a multiple of 64 (64 heads per cube
block); decode over every cache format the interface accepts (V3.2 656 B at d_qk 576; MODEL1 584 B,
V4.1 FP8 528 B and, as the extra cache, V4.1 FP4 288 B at 512), V4.1 in either placement, the
token-interleaved one with records ``bytes_per_token`` apart. The kernel's per-row summation order
does not depend on the batch, so ``enable_batch_invariant`` needs nothing more.
"""
from __future__ import annotations

import torch

from deepjit import descriptors, kernel_args

from .._lib import LIB
from .._operands import KVScope

D = 512
D_QK = (512, 576)
HEADS_PER_BLOCK = 64
_FMT_BF16 = 4  # the kernel's BF16-row token format (the quantised ones are their FormatSpec.code)
RESCALE_SKIP = 8  # how far (natural log) a step's max may pass the softmax's reference max before it moves


def _heads_per_block(h_q: int) -> int | None:
    if h_q % 16 == 0 and h_q <= HEADS_PER_BLOCK:
        return h_q
    return HEADS_PER_BLOCK if h_q % HEADS_PER_BLOCK == 0 else None


def _addressable(s: KVScope) -> bool:
    """Records the kernel's addressing reaches: bytes contiguous, interleaved tokens ``bytes_per_token``
    apart (a block-split block is addressed from its base alone, as the reference does)."""
    c = s.cache
    return c.stride(-1) == 1 and (s.placement == "block_split" or c.shape[1] <= 1 or c.stride(1) == c.shape[-1])


def decode_accepts(q, scopes, sm_scale, d_v, attn_sink, enable_batch_invariant) -> bool:
    return (q.shape[-1] in D_QK and d_v == D and _heads_per_block(q.shape[2]) is not None
            and all(s.fmt.d_qk == q.shape[-1] for s in scopes) and all(map(_addressable, scopes)))


def prefill_accepts(q, kv, indices, sm_scale, d_v, attn_sink, topk_length) -> bool:
    return q.shape[-1] in D_QK and d_v == D and _heads_per_block(q.shape[1]) is not None


def _kernel(heads_per_block: int, d_qk: int):
    return LIB.ascend_kernel("fmla_sparse_mla", "ascend/sparse_mla.asc", {
        "FMLA_HG": heads_per_block, "FMLA_DQK": d_qk, "FMLA_RESCALE_SKIP": RESCALE_SKIP})


def _args(**fields) -> kernel_args.KernelArgs:
    """The kernel's one argument, ``FmlaSparseMlaArgs`` of ``ascend/kernel_args.h`` filled by name."""
    return kernel_args.pack(descriptors.struct_type(LIB.source("ascend/kernel_args.h"), "FmlaSparseMlaArgs"), **fields)


def _scope_args(cache: torch.Tensor, fmt_code: int, block_stride: int, page: int, ntok: int, idx: torch.Tensor,
                length: torch.Tensor | None, dummy: torch.Tensor, block_split: bool = False) -> dict:
    """The ``FmlaScopeArgs`` fields of one token scope; ``idx`` is ``[rows, topk]``."""
    if idx.stride(-1) != 1:
        idx = idx.contiguous()
    return dict(cache=cache, idx=idx, len=dummy if length is None else length, fmt=fmt_code, block_stride=block_stride,
                page=page, ntok=ntok, idx_stride=idx.stride(0), topk=idx.shape[-1], has_len=int(length is not None),
                block_split=int(block_split))


def _cache_scope(s: KVScope, rows: int, dummy: torch.Tensor) -> dict:
    c = s.cache.view(torch.uint8)
    return _scope_args(c, s.fmt.spec.code, c.stride(0), c.shape[1], c.shape[0] * c.shape[1],
                       s.indices.reshape(rows, s.indices.shape[-1]), s.topk_length, dummy,
                       s.placement == "block_split")


def _launch(q2: torch.Tensor, h_q: int, s_q: int, scope0, scope1, attn_sink, sm_scale: float,
            with_max: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = q2.shape[0]
    hg = _heads_per_block(h_q)
    out = torch.empty(rows, h_q, D, dtype=torch.bfloat16, device=q2.device)
    lse = torch.empty(rows, h_q, dtype=torch.float32, device=q2.device)
    max_logits = torch.empty(rows, h_q, dtype=torch.float32, device=q2.device) if with_max else lse
    if scope1 is None:  # an empty second scope: no steps, pointers never read
        scope1 = dict(cache=q2, idx=q2, len=q2, fmt=_FMT_BF16, block_stride=0, page=1, ntok=0, idx_stride=0, topk=0,
                      has_len=0, block_split=0)
    topk = scope0["topk"] + scope1["topk"]
    if topk < 1:  # the kernel's cube core waits for a first K tile unconditionally: no step would deadlock
        raise ValueError(f"indices: expected topk >= 1 index per query row, got {topk}")
    if rows == 0:
        return out, max_logits, lse
    items = rows * (h_q // hg)
    grid = min(items, LIB.num_cube_cores(q2.device))
    sink = q2 if attn_sink is None else attn_sink.float().contiguous()
    _kernel(hg, q2.shape[-1])(grid, _args(q=q2, out=out, lse=lse, max_logits=max_logits, sink=sink, scope0=scope0, scope1=scope1,
                            rows=rows, s_q=s_q, h_q=h_q, q_row_stride=q2.stride(0), q_head_stride=q2.stride(1),
                            has_sink=int(attn_sink is not None), has_max=int(with_max), sm_scale=float(sm_scale)))
    return out, max_logits, lse


def sparse_decode(q: torch.Tensor, scopes: list[KVScope], sm_scale: float, d_v: int, attn_sink: torch.Tensor | None,
                  enable_batch_invariant: bool) -> tuple[torch.Tensor, torch.Tensor]:
    b, s_q, h_q, d_qk = q.shape
    rows = b * s_q
    q2 = q.reshape(rows, h_q, d_qk)
    scope1 = _cache_scope(scopes[1], rows, q2) if len(scopes) > 1 else None
    out, _, lse = _launch(q2, h_q, s_q, _cache_scope(scopes[0], rows, q2), scope1, attn_sink, sm_scale, False)
    return out.view(b, s_q, h_q, D), lse.view(b, s_q, h_q).transpose(1, 2)


def sparse_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int,
                   attn_sink: torch.Tensor | None,
                   topk_length: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    s_q, h_q, _ = q.shape
    kv_bytes = kv.view(torch.uint8)   # [s_kv, 1, 2 * d_qk]: one BF16 row per token, rows kv.stride(0) apart
    scope0 = _scope_args(kv_bytes, _FMT_BF16, kv_bytes.stride(0), 1, kv.shape[0],
                         indices.reshape(s_q, indices.shape[-1]), topk_length, q)  # s_q may be 0: no -1 there
    # topk_length is per query row: one row per "batch" (s_q = 1 in the kernel's row -> batch map)
    return _launch(q, h_q, 1, scope0, None, attn_sink, sm_scale, True)
