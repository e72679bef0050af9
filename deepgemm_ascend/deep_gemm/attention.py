"""MQA logits of DeepSeek's lightning indexer: contiguous KV (prefill) and the fused paged KV cache (decode).

Inputs (NVIDIA forms, plus DeepGEMM-Ascend's MXFP8 scales):
- FP8: Q ``[S, H, D]`` E4M3 without scales (or with Ascend per-32 UE8M0 scales, int16 ``[S, H, D/64]``),
  KV ``[S_kv, D]`` E4M3 with one FP32 scale per token ``[S_kv]`` (or Ascend int16 ``[S_kv, D/64]``).
- FP4: Q ``[S, H, D/2]`` packed E2M1 with int32 ``[S, H]`` (4 UE8M0 per word, gran 32; FP32
  ``[S, H, D/32]`` accepted), KV ``[S_kv, D/2]`` with int32 ``[S_kv]`` (or FP32 ``[S_kv, D/32]``).
The output is a view into a buffer whose rows are padded as upstream allocates them (row stride a
multiple of 1024 bytes); entries outside a row's KV range are -inf with ``clean_logits`` and
unspecified otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from . import _dispatch, _lib, formats, runtime
from . import _operands as ops
from . import _validate as v
from .utils.math import align, ceil_div

BLOCK_QH, BLOCK_KV, SPLIT_KV = 128, 256, 256
FP8_HEAD_DIMS, FP4_HEAD_DIMS = (32, 64, 128), (64, 128)
INT32_MAX = (1 << 31) - 1
LOGITS_DTYPES = (torch.float32, torch.bfloat16)


@dataclass
class Quantised(ops.PackedScales):
    """An MQA operand: raw ``data``, its FP32 scales ``sf`` (per token ``[N]`` or per 32 ``[N.., D/32]``); per-32
    scales given packed are kept as ``packed_sf`` ``[rows, words]`` (int32 / int16), unpacked when ``sf`` is read."""
    data: torch.Tensor
    sf: torch.Tensor | None
    fp4: bool
    per_token_sf: bool
    packed_sf: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)

    def dequantized(self) -> torch.Tensor:
        values = formats.unpack_fp4(self.data) if self.fp4 else self.data.float()
        if self.sf is None:
            return values
        if self.per_token_sf:
            return values * self.sf.unsqueeze(-1)
        return values * self.sf.repeat_interleave(32, -1)[..., :values.size(-1)]


def _head_dim(name: str, data: torch.Tensor, fp4: bool) -> int:
    dim = data.size(-1) * (2 if fp4 else 1)
    allowed = FP4_HEAD_DIMS if fp4 else FP8_HEAD_DIMS
    if dim not in allowed:
        raise v.fail(f"{name} head dim", f"one of {allowed} ({'FP4' if fp4 else 'FP8'})", dim)
    return dim


def _mx_operand(name: str, data: torch.Tensor, sf, rows_shape: tuple, head_dim: int, fp4: bool) -> Quantised:
    """The operand with per-32 UE8M0 scales of ``rows_shape`` rows in int32 (one word per row, ``[*rows]``), int16
    pairs (``[*rows, D/64]``), float8_e8m0fnu or FP32 (``[*rows, D/32]``): FP32 ``sf`` ``[*rows, D/32]``, unpacked
    from packed ones (kept, ``[rows, words]``) only when read."""
    v.tensor(name, sf, ops.SF_DTYPES)
    rows = math.prod(rows_shape)
    if sf.dtype == torch.int32 and tuple(sf.shape) == rows_shape:
        sf = sf.reshape(rows, 1)
    else:
        sf = sf.reshape(rows, -1) if sf.numel() and tuple(sf.shape[:len(rows_shape)]) == rows_shape else sf
    if sf.dim() != 2 or sf.size(0) != rows:
        raise v.fail(name, f"scales for {rows_shape} rows (int32 {rows_shape} or [*rows, D/32|D/64])",
                     f"shape {tuple(sf.shape)}")
    op = Quantised(data, None, fp4, False)
    if sf.dtype in formats.PACKED_SF_DTYPES:   # UE8M0 bytes: nothing to check but the shape
        ops.check_packed(name, sf, rows, -(-head_dim // 32), 32, ())
        packed = sf
        op.set_packed_sf(packed, lambda: formats.unpack_ue8m0(packed)[..., :-(-head_dim // 32)].reshape(
            *rows_shape, -1))
    else:
        op.sf = ops.sf_to_fp32(name, sf, rows, head_dim, 1, 32, None, require_pow2=True).reshape(*rows_shape, -1)
    return op


def _query(q, expected_rank: int, legacy: bool) -> Quantised:
    if legacy:
        data, sf = v.tensor("q", q), None
    else:
        data, sf = v.pair("q", q, second_optional=True)
    name = "q" if legacy else "q[0]"
    v.tensor(name, data, (formats.FP8_DTYPE,) if legacy else ops.AB_DTYPES, expected_rank)
    v.contiguous(name, data)
    fp4 = formats.is_fp4(data)
    head_dim = _head_dim(name, data, fp4)
    if fp4 and sf is None:
        raise v.fail("q[1]", "UE8M0 scales for an FP4 query", None)
    if sf is None:
        return Quantised(data, None, fp4, False)
    return _mx_operand("q[1]", data, sf, tuple(data.shape[:-1]), head_dim, fp4)


def _kv_operand(name: str, kv: torch.Tensor, sf, fp4: bool, head_dim: int) -> Quantised:
    """A contiguous KV with per-token FP32 scales or per-32 UE8M0 ones."""
    v.tensor(name, sf, ops.SF_DTYPES)
    if not fp4 and sf.dtype == torch.float32 and sf.dim() == 1:
        v.shape(name, sf, (kv.size(0),))
        return Quantised(kv, sf, fp4, True)
    return _mx_operand(name, kv, sf, (kv.size(0),), head_dim, fp4)


def _check_weights(weights, rows: int, heads: int, logits_dtype) -> None:
    v.tensor("weights", weights, (torch.float32, torch.bfloat16), 2)
    v.shape("weights", weights, (rows, heads))
    if weights.size(1) > 1 and weights.stride(1) != 1:
        raise v.fail("weights.stride(1)", "1", weights.stride(1))
    if weights.dtype == torch.bfloat16 and logits_dtype != torch.bfloat16:
        raise v.fail("logits_dtype", "torch.bfloat16 with BF16 weights", logits_dtype)


def _logits_dtype(logits_dtype) -> torch.dtype:
    if logits_dtype not in LOGITS_DTYPES:
        raise v.fail("logits_dtype", "torch.float32 or torch.bfloat16", logits_dtype)
    return logits_dtype


def _early_device_check(**named) -> None:
    """One device for every tensor given, before any check reads values."""
    flat = []
    for name, x in named.items():
        parts = x if isinstance(x, (tuple, list)) else (x,)
        flat += [(f"{name}[{i}]" if len(parts) > 1 else name, t) for i, t in enumerate(parts) if isinstance(t, torch.Tensor)]
    v.same_device(flat)


def _mqa(q, kv, weights, ks, ke, clean_logits, max_seqlen_k, logits_dtype, legacy: bool) -> torch.Tensor:
    _early_device_check(q=q, kv=kv, weights=weights, cu_seq_len_k_start=ks, cu_seq_len_k_end=ke)
    query = _query(q, 3, legacy)
    kv_data, kv_sf = v.pair("kv", kv)
    v.tensor("kv[0]", kv_data, (query.data.dtype,) if not query.fp4 else formats.FP4_DTYPES, 2)
    v.contiguous("kv[0]", kv_data)
    seq_len, heads = query.data.shape[:2]
    head_dim = _head_dim("q", query.data, query.fp4)
    if _head_dim("kv[0]", kv_data, query.fp4) != head_dim:
        raise v.fail("kv[0]", f"head dim {head_dim} (as q)", tuple(kv_data.shape))
    key = _kv_operand("kv[1]", kv_data, kv_sf, query.fp4, head_dim)
    logits_dtype = _logits_dtype(logits_dtype)
    _check_weights(weights, seq_len, heads, logits_dtype)
    seq_len_kv = kv_data.size(0)
    for name, t in (("cu_seq_len_k_start", ks), ("cu_seq_len_k_end", ke)):
        v.tensor(name, t, (torch.int32,), 1)
        v.contiguous(name, t)
        v.shape(name, t, (seq_len,))
    v.boolean("clean_logits", clean_logits)
    v.integer("max_seqlen_k", max_seqlen_k, 0, INT32_MAX)  # a column index of the logits is an int32
    device = v.same_device([("q", query.data), ("kv[0]", kv_data), ("kv[1]", kv_sf), ("weights", weights),
                            ("cu_seq_len_k_start", ks), ("cu_seq_len_k_end", ke)])
    # the Ascend kernels clamp the ranges themselves: no host read of device tensors there
    host_checks = not _lib.on_ascend(device)
    if host_checks and seq_len and bool(((ks < 0) | (ks > ke) | (ke > seq_len_kv)).any()):
        raise v.fail("cu_seq_len_k_start/end", f"0 <= start <= end <= {seq_len_kv} (S_kv) per row",
                     f"start {ks.tolist()}, end {ke.tolist()}")
    compressed = max_seqlen_k > 0
    if compressed:
        if clean_logits:
            raise v.fail("clean_logits", "False with compressed logits (max_seqlen_k > 0)", True)
        if host_checks and seq_len and int((ke - ks).max()) > max_seqlen_k:
            raise v.fail("max_seqlen_k", f">= the longest KV range {int((ke - ks).max())}", max_seqlen_k)
    elem = logits_dtype.itemsize
    rows = align(seq_len, max(1, BLOCK_QH // heads))
    width = max_seqlen_k if compressed else seq_len_kv
    stride = align(align(max_seqlen_k, BLOCK_KV) if compressed else seq_len_kv + BLOCK_KV, 1024 // elem)
    v.allocation("max_seqlen_k" if compressed else "kv[0]", rows * stride * elem, device,
                 f"logits [{rows}, {stride}] {logits_dtype}")
    logits = torch.empty(rows, stride, dtype=logits_dtype, device=device)[:seq_len, :width]
    _dispatch.run("mqa_logits", device, query, key, weights, ks, ke, logits, compressed, clean_logits)
    return logits


def fp8_fp4_mqa_logits(q, kv, weights: torch.Tensor, cu_seq_len_k_start: torch.Tensor, cu_seq_len_k_end: torch.Tensor,
                       clean_logits: bool = True, max_seqlen_k: int = 0,
                       logits_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Logits ``[S, S_kv]`` (or ``[S, max_seqlen_k]`` compressed: column t is KV position ``ks[i] + t``)."""
    return _mqa(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, max_seqlen_k, logits_dtype, False)


def fp8_mqa_logits(q: torch.Tensor, kv, weights: torch.Tensor, cu_seq_len_k_start: torch.Tensor,
                   cu_seq_len_k_end: torch.Tensor, clean_logits: bool = True, max_seqlen_k: int = 0) -> torch.Tensor:
    """Legacy FP8-only form (plain ``q``), FP32 logits."""
    return _mqa(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, max_seqlen_k, torch.float32, True)


# ---- paged ----------------------------------------------------------------------------------------
@dataclass
class PagedKV:
    """The fused cache: per page, ``block_kv`` tokens of values, then their ``block_kv`` 4-byte scales.
    ``mx``: DeepGEMM-Ascend's MX cache (E4M3 or packed FP4 values), per token ``D/64`` int16 pairs of
    UE8M0 per-32 scales behind the page's values; ``nz`` (``use_ascend_kv_layout``): the page in the
    cube's fractal order, values ``[value bytes/32, block_kv, 32]`` bytes and scales ``[block_kv/16, D/64, 16]``."""
    cache: torch.Tensor
    fp4: bool
    head_dim: int
    mx: bool = False
    nz: bool = False

    def _mx_dequantized(self, raw: torch.Tensor) -> torch.Tensor:
        num_blocks, block_kv, dim = raw.size(0), self.cache.size(1), self.head_dim
        pairs, value_bytes = dim // 64, dim // 2 if self.fp4 else dim
        values = raw[:, :block_kv * value_bytes]
        words = raw[:, block_kv * value_bytes:block_kv * (value_bytes + 2 * pairs)].contiguous().view(torch.int16)
        if self.nz:  # 32-byte fractal columns (32 E4M3 or 64 E2M1 values)
            values = values.reshape(num_blocks, value_bytes // 32, block_kv, 32).transpose(1, 2)
            words = words.view(num_blocks, block_kv // 16, pairs, 16).transpose(2, 3)
        values = values.reshape(num_blocks, block_kv, value_bytes)
        values = formats.unpack_fp4(values) if self.fp4 else values.view(torch.float8_e4m3fn).float()
        exponents = words.contiguous().view(-1).view(torch.uint8).view(num_blocks, block_kv, 2 * pairs).int()
        scales = torch.where(exponents == 255, float("nan"), torch.exp2((exponents - 127).float()))
        return values * scales.repeat_interleave(32, -1)

    def dequantized(self) -> torch.Tensor:
        num_blocks, block_kv = self.cache.shape[:2]
        value_bytes = self.head_dim // 2 if self.fp4 else self.head_dim
        page = self.cache.stride(0)
        if self.mx:
            return self._mx_dequantized(self.cache.as_strided((num_blocks, block_kv * self.cache.size(3)), (page, 1)))
        raw = self.cache.as_strided((num_blocks, block_kv * (value_bytes + 4)), (page, 1))
        values = raw[:, :block_kv * value_bytes].reshape(num_blocks, block_kv, value_bytes)
        scales = raw[:, block_kv * value_bytes:].contiguous()
        if self.fp4:
            sf = formats.unpack_ue8m0(scales.view(torch.int32)).view(num_blocks, block_kv, 4)
            return formats.unpack_fp4(values) * sf.repeat_interleave(32, -1)[..., :self.head_dim]
        return values.view(torch.float8_e4m3fn).float() * scales.view(torch.float32).unsqueeze(-1)


def get_paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int,
                                  indices: torch.Tensor | None = None) -> torch.Tensor:
    """int32 ``[num_sms + 1, 2]``: entry i = (first query row of a request, 256-token KV split of it) where
    worker i starts. As upstream's SM100 scheduler: a request (``next_n`` rows, or a run of equal varlen
    ``indices``) weighs ``ceil(context_len / 256) * rows``; the total is cut evenly over ``num_sms``
    workers (the remainder to the first ones), each cut rounded down to a split of its request; the last
    entry is the end sentinel ``(rows, 0)``. ``context_lens`` is ``[B, next_n]`` or 1-D ``[B]`` (counted
    as one row per entry: the metadata has no ``next_n``). The CPU kernels do not need it (API parity)."""
    v.tensor("context_lens", context_lens, (torch.int32,), (1, 2))
    v.contiguous("context_lens", context_lens)
    v.integer("block_kv", block_kv, 1)
    if block_kv not in (32, 64):
        raise v.fail("block_kv", "32 or 64", block_kv)
    v.integer("num_sms", num_sms, 1, INT32_MAX - 1)  # the schedule's rows are int32-indexed
    # a dozen int64 words per worker while scheduling (both paths), before any is allocated
    v.allocation("num_sms", (num_sms + 1) * 96, context_lens.device, "schedule of num_sms + 1 workers")
    if indices is not None:
        v.tensor("indices", indices, (torch.int32,), 1)
        v.contiguous("indices", indices)
        v.shape("indices", indices, (context_lens.size(0),))
        if context_lens.dim() != 2 or context_lens.size(1) != 1:
            raise v.fail("context_lens", "shape [tokens, 1] with indices (varlen)", tuple(context_lens.shape))
    if _lib.on_ascend(context_lens.device):   # the Ascend kernel reads the lengths (no host read; negative -> 0)
        return _dispatch.run("paged_mqa_logits_metadata", context_lens.device, context_lens, indices, num_sms)
    lens = context_lens.flatten().tolist()
    if any(x < 0 for x in lens):
        raise v.fail("context_lens", "lengths >= 0", f"{min(lens)} at flat index {lens.index(min(lens))}")
    return _dispatch.run("paged_mqa_logits_metadata", context_lens.device, context_lens, indices, num_sms)


def _mx_cache(q, query: Quantised, legacy: bool, use_ascend_kv_layout: bool) -> bool:
    """Whether the cache is DeepGEMM-Ascend's MX form (``D/64`` int16 scale pairs per token): a query with
    int16-packed scales (E4M3 or FP4: that library's only paged forms) or ``use_ascend_kv_layout``."""
    v.boolean("use_ascend_kv_layout", use_ascend_kv_layout)
    int16_q = not legacy and q[1] is not None and q[1].dtype == torch.int16
    if use_ascend_kv_layout and not query.has_sf:
        raise v.fail("q", "per-32 UE8M0 scales (E4M3 or FP4) with use_ascend_kv_layout (the MX cache)", "no scales")
    return use_ascend_kv_layout or int16_q


def _paged(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
           logits_dtype, indices, legacy: bool, use_ascend_kv_layout: bool = False) -> torch.Tensor:
    _early_device_check(q=q, kv_cache=kv_cache, weights=weights, context_lens=context_lens, block_table=block_table,
                        schedule_meta=schedule_meta, indices=indices)
    query = _query(q, 4, legacy)
    batch, next_n, heads = query.data.shape[:3]
    head_dim = _head_dim("q", query.data, query.fp4)
    mx = _mx_cache(q, query, legacy, use_ascend_kv_layout)
    v.tensor("kv_cache", kv_cache, (torch.uint8,), 4)
    if mx and head_dim not in (64, 128):
        raise v.fail("q head dim", "64 or 128 (the MX cache)", head_dim)
    scale_bytes = 2 * (head_dim // 64) if mx else 4
    row_bytes = (head_dim // 2 if query.fp4 else head_dim) + scale_bytes
    num_blocks, block_kv, kv_heads, width = kv_cache.shape
    if kv_heads != 1 or width != row_bytes:
        raise v.fail("kv_cache", f"shape [num_blocks, block_kv, 1, {row_bytes}]", tuple(kv_cache.shape))
    block_kvs = (64, 128) if mx else (32, 64)
    if block_kv not in block_kvs:
        raise v.fail("kv_cache block_kv", f"{block_kvs[0]} or {block_kvs[1]}", block_kv)
    if kv_cache.stride(3) != 1 or kv_cache.stride(1) != row_bytes or kv_cache.stride(0) % scale_bytes \
            or (num_blocks > 1 and kv_cache.stride(0) < block_kv * row_bytes):
        raise v.fail("kv_cache strides", f"(page stride % {scale_bytes} == 0 and >= {block_kv * row_bytes}, "
                     f"{row_bytes}, *, 1)", tuple(kv_cache.stride()))
    logits_dtype = _logits_dtype(logits_dtype)
    _check_weights(weights, batch * next_n, heads, logits_dtype)
    if query.data.dtype == formats.FP8_DTYPE and not weights.is_contiguous():
        raise v.fail("weights", "a contiguous tensor (FP8 query)", tuple(weights.stride()))
    v.tensor("context_lens", context_lens, (torch.int32,), (1, 2))
    v.contiguous("context_lens", context_lens)
    v.shape("context_lens", context_lens, (batch, next_n) if context_lens.dim() == 2 else (batch,))
    v.tensor("block_table", block_table, (torch.int32,), 2)
    if block_table.size(0) != batch:
        raise v.fail("block_table", f"{batch} rows (one per batch entry of q, per token with indices)",
                     tuple(block_table.shape))
    if block_table.size(1) > 1 and block_table.stride(1) != 1:
        raise v.fail("block_table.stride(1)", "1", block_table.stride(1))
    num_sms = runtime.get_num_sms()
    v.tensor("schedule_meta", schedule_meta, (torch.int32,), 2)
    v.contiguous("schedule_meta", schedule_meta)
    v.shape("schedule_meta", schedule_meta, (num_sms + 1, 2))
    v.integer("max_context_len", max_context_len, 0, INT32_MAX)  # a column index of the logits is an int32
    v.boolean("clean_logits", clean_logits)
    device = v.same_device([("q", query.data), ("kv_cache", kv_cache), ("weights", weights),
                            ("context_lens", context_lens), ("block_table", block_table),
                            ("schedule_meta", schedule_meta), ("indices", indices)])
    if indices is not None:
        v.tensor("indices", indices, (torch.int32,), 1)
        v.contiguous("indices", indices)
        v.shape("indices", indices, (batch,))
        if next_n != 1:
            raise v.fail("q", "next_n == 1 with indices (varlen)", tuple(query.data.shape))
    lens = context_lens.flatten()
    capacity = min(max_context_len, block_table.size(1) * block_kv)
    # the Ascend kernel clamps lengths and skips bad page ids itself: no host read of device tensors there
    host_checks = not _lib.on_ascend(device)
    if host_checks and lens.numel() and bool(((lens < 0) | (lens > capacity)).any()):
        raise v.fail("context_lens", f"values in [0, {capacity}] (max_context_len and block_table capacity)",
                     lens.tolist())
    for b in range(batch if host_checks else 0):
        used = ceil_div(int(context_lens[b].max()), block_kv) if next_n else 0
        pages = block_table[b, :used]
        if used and bool(((pages < 0) | (pages >= num_blocks)).any()):
            raise v.fail(f"block_table[{b}]", f"page ids in [0, {num_blocks})", pages.tolist())
    if context_lens.dim() == 1:
        # upstream's 1-D form: row (b, t) sees positions [0, context_lens[b] - next_n + t]
        context_lens = (context_lens[:, None] - (next_n - 1) + torch.arange(next_n, device=device)).clamp_min(0)
        context_lens = context_lens.to(torch.int32)
    elem = logits_dtype.itemsize
    stride = align(align(max_context_len, SPLIT_KV), 1024 // elem)
    v.allocation("max_context_len", batch * next_n * stride * elem, device,
                 f"logits [{batch * next_n}, {stride}] {logits_dtype}")
    logits = torch.empty(batch * next_n, stride, dtype=logits_dtype, device=device)[:, :max_context_len]
    _dispatch.run("paged_mqa_logits", device, query, PagedKV(kv_cache, query.fp4, head_dim, mx, use_ascend_kv_layout),
                  weights, context_lens, block_table, logits, clean_logits)
    return logits


def fp8_fp4_paged_mqa_logits(q, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
                             block_table: torch.Tensor, schedule_meta: torch.Tensor, max_context_len: int,
                             clean_logits: bool = False, logits_dtype: torch.dtype = torch.float32,
                             indices: torch.Tensor | None = None, use_ascend_kv_layout: bool = False) -> torch.Tensor:
    """Logits ``[B*next_n, max_context_len]``: row (b, t) covers KV positions ``[0, context_lens[b, t])``
    (1-D ``context_lens [B]``: ``[0, context_lens[b] - next_n + t]``) of the pages ``block_table[b]``.
    With varlen ``indices`` (next_n == 1, B query tokens) each token reads its own row of
    ``block_table [B, max_blocks]`` as upstream does; ``indices`` only groups the tokens into requests.
    A query with int16-packed UE8M0 scales, E4M3 or packed FP4 (DeepGEMM-Ascend's forms), reads the MX
    cache ``[num_blocks, block_kv (64 or 128), 1, D_storage + 2 * (D/64)]`` (per page the values, then per
    token its int16 scale pairs); ``use_ascend_kv_layout`` (DeepGEMM-Ascend's keyword): pages in the
    cube's fractal order (``PagedKV``)."""
    return _paged(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
                  logits_dtype, indices, False, use_ascend_kv_layout)


def fp8_paged_mqa_logits(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
                         block_table: torch.Tensor, schedule_meta: torch.Tensor, max_context_len: int,
                         clean_logits: bool = False, indices: torch.Tensor | None = None) -> torch.Tensor:
    """Legacy FP8-only form (plain ``q``), FP32 logits."""
    return _paged(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
                  torch.float32, indices, True)


