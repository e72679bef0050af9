"""The public ops: validate once, then run the implementation ``_dispatch.TABLE`` gives the
device (host kernels for CPU tensors, the Ascend kernels for the sparse ops on NPU tensors where
they cover the case, the reference elsewhere)."""
from __future__ import annotations

import torch

from deepjit import validation as V
from deepjit.torch_library import traced_as

from . import _dispatch, reference
from . import validation as check
from ._operands import KVCacheFormat, KVScope
from .metadata import FlashMLASchedMeta, record_or_check

SPARSE_ONLY = ("attn_sink", "extra_k_cache", "extra_indices_in_kvcache", "topk_length", "extra_topk_length")


def flash_mla_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: torch.Tensor | None,
    cache_seqlens: torch.Tensor | None,
    head_dim_v: int,
    tile_scheduler_metadata: FlashMLASchedMeta,
    num_splits: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    is_fp8_kvcache: bool = True,
    indices: torch.Tensor | None = None,
    attn_sink: torch.Tensor | None = None,
    extra_k_cache: torch.Tensor | None = None,
    extra_indices_in_kvcache: torch.Tensor | None = None,
    topk_length: torch.Tensor | None = None,
    extra_topk_length: torch.Tensor | None = None,
    enable_batch_invariant: bool = False,
    *,
    kv_layout: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode attention. Sparse mode (``indices`` given): q bf16 [b, s_q, h_q, d_qk] over a quantised
    paged cache (format from bytes_per_token; V4.1 placement from ``kv_layout``, default
    ``"interleaved"``) plus an optional extra cache. Dense mode: a bf16/fp16 paged cache read through
    ``block_table`` / ``cache_seqlens``. Returns out [b, s_q, h_q, head_dim_v] and lse fp32 [b, h_q, s_q]."""
    if not isinstance(tile_scheduler_metadata, FlashMLASchedMeta):
        raise TypeError(f"tile_scheduler_metadata: expected the FlashMLASchedMeta from get_mla_metadata(), "
                        f"got {type(tile_scheduler_metadata).__name__}")
    if num_splits is not None and not isinstance(num_splits, torch.Tensor):
        raise V.fail("num_splits", "None (or an old-API tensor, ignored)", type(num_splits).__name__, TypeError)
    check.tensor("q", q, (torch.bfloat16, torch.float16), 4)
    check.last_stride_one("q", q)
    causal = check.flag("causal", causal)
    is_fp8_kvcache = check.flag("is_fp8_kvcache", is_fp8_kvcache)
    enable_batch_invariant = check.flag("enable_batch_invariant", enable_batch_invariant)
    check.one_of("head_dim_v", head_dim_v, (check.D_V,))
    b, s_q, h_q, d_qk = q.shape
    sm_scale = d_qk ** -0.5 if softmax_scale is None else check.real_number("softmax_scale", softmax_scale)
    if not isinstance(k_cache, torch.Tensor):
        raise TypeError(f"k_cache: expected a tensor, got {type(k_cache).__name__}")
    if indices is None:
        return _dense_decode(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata, sm_scale,
                             causal, is_fp8_kvcache, enable_batch_invariant,
                             {n: v for n, v in zip(SPARSE_ONLY, (attn_sink, extra_k_cache, extra_indices_in_kvcache,
                                                                 topk_length, extra_topk_length), strict=True)})

    # ---- sparse ----
    if causal:
        raise V.fail("causal", "False in sparse mode (indices given)", True)
    if not is_fp8_kvcache:
        raise V.fail("is_fp8_kvcache", "True in sparse mode (indices given)", False)
    if q.dtype != torch.bfloat16:
        raise V.fail("q", "dtype torch.bfloat16 in sparse mode", q.dtype, TypeError)
    check.one_of("q.shape[2] (h_q)", h_q, check.SUPPORTED_H_Q)
    check.one_of("q.shape[3] (d_qk)", d_qk, check.SUPPORTED_D_QK)
    fmt = check.quantized_cache("k_cache", k_cache, d_qk, q.device)
    if fmt is KVCacheFormat.V41_FP4:
        raise V.fail("k_cache", "a format other than V4.1 FP4 (288 B/token is only allowed as extra_k_cache)",
                     "a V4.1 FP4 cache")
    check.slot_indices("indices", indices, b, s_q, k_cache.shape[0] * k_cache.shape[1], q.device)
    topk = indices.shape[-1]
    check.lengths("topk_length", topk_length, b, topk, q.device)
    check.attn_sink(attn_sink, h_q, q.device)
    scopes = [KVScope(k_cache, fmt, fmt.placement(kv_layout), indices, topk_length)]
    if (extra_k_cache is None) != (extra_indices_in_kvcache is None):
        given, missing = (("extra_k_cache", "extra_indices_in_kvcache") if extra_k_cache is not None
                          else ("extra_indices_in_kvcache", "extra_k_cache"))
        raise V.fail(missing, f"a tensor with {given} (give both or neither)", None)
    if extra_k_cache is None and extra_topk_length is not None:
        raise V.fail("extra_topk_length", "None without extra_k_cache (it is only valid with one)", "a tensor")
    extra_page = extra_topk = None
    if extra_k_cache is not None:
        efmt = check.quantized_cache("extra_k_cache", extra_k_cache, d_qk, q.device)
        check.slot_indices("extra_indices_in_kvcache", extra_indices_in_kvcache, b, s_q,
                           extra_k_cache.shape[0] * extra_k_cache.shape[1], q.device)
        extra_page, extra_topk = extra_k_cache.shape[1], extra_indices_in_kvcache.shape[-1]
        check.lengths("extra_topk_length", extra_topk_length, b, extra_topk, q.device)
        scopes.append(KVScope(extra_k_cache, efmt, efmt.placement(kv_layout), extra_indices_in_kvcache,
                              extra_topk_length))
    record_or_check(tile_scheduler_metadata, FlashMLASchedMeta.Config(
        b, s_q, h_q, k_cache.shape[1], k_cache.shape[2], causal, is_fp8_kvcache, topk, extra_page, extra_topk,
        enable_batch_invariant), q.device)
    return _dispatch.run("sparse_decode", q.device, q, scopes, sm_scale, head_dim_v, attn_sink, enable_batch_invariant)


def _dense_decode(q, k_cache, block_table, cache_seqlens, head_dim_v, meta, sm_scale, causal, is_fp8_kvcache,
                  enable_batch_invariant, sparse_args):
    given = [n for n, v in sparse_args.items() if v is not None]
    if given:
        raise V.fail(", ".join(given), "None without indices (only valid in sparse mode)", "a value")
    # is_fp8_kvcache defaults to True in the latest API and to False in the 2026-04 one, which still had
    # this dense path: accept either, the cache dtype decides
    if k_cache.dtype in check.CACHE_DTYPES:
        raise V.fail("k_cache", "a BF16/FP16 cache in dense mode (indices None has no FP8 path)",
                     f"a {k_cache.dtype} cache without indices")
    b, s_q, h_q, d_qk = q.shape
    check.tensor("k_cache", k_cache, (q.dtype,), 4, q.device)
    check.last_stride_one("k_cache", k_cache)
    nb, p, h_kv, d = k_cache.shape
    if d != d_qk:
        raise V.fail("k_cache", f"head dim {d_qk} like q", d)
    if head_dim_v > d_qk:
        raise V.fail("head_dim_v", f"a value <= d_qk ({d_qk})", head_dim_v)
    if h_kv < 1 or h_q % h_kv:
        raise V.fail("k_cache", f"num_heads_k dividing num_heads_q ({h_q})", h_kv)
    check.tensor("block_table", block_table, (torch.int32,), 2, q.device)
    check.last_stride_one("block_table", block_table)
    if block_table.shape[0] != b:
        raise ValueError(f"block_table: expected {b} rows (batch), got shape {tuple(block_table.shape)}")
    if cache_seqlens is None:
        raise TypeError("cache_seqlens: expected a tensor in dense mode, got None")
    # values (lengths, block ids) are checked on CPU tensors only: the Ascend kernel clamps them
    on_host = check.host_values(q)
    check.lengths("cache_seqlens", cache_seqlens, b, block_table.shape[1] * p, q.device, values=on_host)
    used = (torch.arange(block_table.shape[1]).view(1, -1) * p < cache_seqlens.view(-1, 1).long()) if on_host else None
    if used is not None and used.any():
        ids = block_table[used]
        if int(ids.min()) < 0 or int(ids.max()) >= nb:
            raise V.fail("block_table", f"blocks covering cache_seqlens in [0, {nb})",
                         f"range [{int(ids.min())}, {int(ids.max())}]")
    record_or_check(meta, FlashMLASchedMeta.Config(b, s_q, h_q, p, h_kv, causal, is_fp8_kvcache, None, None, None,
                                                   enable_batch_invariant), q.device)
    return _dispatch.run("dense_decode", q.device, q, k_cache, block_table, cache_seqlens, head_dim_v, sm_scale, causal)


def flash_mla_sparse_fwd(
    q: torch.Tensor,
    kv: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    d_v: int = 512,
    attn_sink: torch.Tensor | None = None,
    topk_length: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sparse prefill: q bf16 [s_q, h_q, d_qk], kv bf16 [s_kv, 1, d_qk], indices int32 [s_q, 1, topk]
    (ids < 0 or >= s_kv ignored). Returns out bf16 [s_q, h_q, d_v], max_logits and lse fp32 [s_q, h_q]
    (natural log; rows with no valid token: out 0, max_logits -inf, lse +inf)."""
    check.tensor("q", q, (torch.bfloat16,), 3)
    check.last_stride_one("q", q)
    s_q, h_q, d_qk = q.shape
    check.one_of("q.shape[1] (h_q)", h_q, check.SUPPORTED_H_Q)
    check.one_of("q.shape[2] (d_qk)", d_qk, check.SUPPORTED_D_QK)
    check.tensor("kv", kv, (torch.bfloat16,), 3, q.device)
    check.last_stride_one("kv", kv)
    if kv.shape[1] != 1 or kv.shape[2] != d_qk:
        raise ValueError(f"kv: expected shape [s_kv, 1, {d_qk}], got {tuple(kv.shape)}")
    check.tensor("indices", indices, (torch.int32,), 3, q.device)
    if indices.shape[0] != s_q or indices.shape[1] != 1 or indices.shape[2] < 1:
        raise ValueError(f"indices: expected shape [{s_q}, 1, topk >= 1], got {tuple(indices.shape)}")
    check.last_stride_one("indices", indices)
    sm_scale = check.real_number("sm_scale", sm_scale)
    check.one_of("d_v", d_v, (check.D_V,))
    check.attn_sink(attn_sink, h_q, q.device)
    check.lengths("topk_length", topk_length, s_q, indices.shape[-1], q.device)
    return _dispatch.run("sparse_prefill", q.device, q, kv, indices, sm_scale, d_v, attn_sink, topk_length)


# ---- dense varlen prefill (forward; backward by autograd through the reference) ----------------------

def _check_varlen(q, k, v, cu_seqlens_qo, cu_seqlens_kv, dropout_p, deterministic, softmax_scale):
    if dropout_p != 0.0:
        raise V.fail("dropout_p", "0.0", repr(dropout_p))
    if deterministic:
        raise V.fail("deterministic", "False", True)
    check.tensor("q", q, (torch.bfloat16, torch.float16, torch.float32), 3)
    check.tensor("k", k, (q.dtype,), 3, q.device)
    check.tensor("v", v, (q.dtype,), 3, q.device)
    if k.shape[-1] != q.shape[-1]:
        raise V.fail("k", f"head dim {q.shape[-1]} like q", k.shape[-1])
    if v.shape[0] != k.shape[0] or v.shape[1] != k.shape[1]:
        raise ValueError(f"v: expected [{k.shape[0]}, {k.shape[1]}, d_v] like k, got {tuple(v.shape)}")
    if k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        raise V.fail("k", f"num kv heads dividing num q heads ({q.shape[1]})", k.shape[1])
    for name, cu, total in (("cu_seqlens_qo", cu_seqlens_qo, q.shape[0]), ("cu_seqlens_kv", cu_seqlens_kv, k.shape[0])):
        check.tensor(name, cu, (torch.int32,), 1, q.device)
        if cu.numel() < 1:
            raise V.fail(name, "at least one entry (the leading 0)", 0)
        if check.host_values(cu) and (int(cu[0]) != 0 or int(cu[-1]) != total or bool((cu[1:] < cu[:-1]).any())):
            raise V.fail(name, f"non-decreasing prefix sums from 0 to {total}", cu.tolist())
    if cu_seqlens_qo.numel() != cu_seqlens_kv.numel():
        raise ValueError(f"cu_seqlens_kv: expected {cu_seqlens_qo.numel()} entries like cu_seqlens_qo, "
                         f"got {cu_seqlens_kv.numel()}")
    return q.shape[-1] ** -0.5 if softmax_scale is None else check.real_number("softmax_scale", softmax_scale)


def _out_buffer(t, name: str, shape: tuple, dtype: torch.dtype, device) -> None:
    """A caller's output buffer (upstream's ``out=``/``lse=``/``dq=``...), checked before anything runs."""
    check.tensor(name, t, (dtype,), len(shape), device)
    if tuple(t.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {tuple(t.shape)}")


def _flash_attn_varlen_forward(q, k, v, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo, max_seqlen_kv, out=None, lse=None,
                               causal=False, softmax_scale=None, is_varlen=True):
    """Upstream's private forward: ``(out [total_q, h_q, d_v], lse fp32 [total_q, h_q])`` with lse stored
    head-major (``stride(0) == 1``), written into ``out`` / ``lse`` when given."""
    scale = _check_varlen(q, k, v, cu_seqlens_qo, cu_seqlens_kv, 0.0, False, softmax_scale)
    causal = check.flag("causal", causal)
    if out is not None:
        _out_buffer(out, "out", (q.shape[0], q.shape[1], v.shape[-1]), q.dtype, q.device)
    if lse is not None:
        _out_buffer(lse, "lse", (q.shape[0], q.shape[1]), torch.float32, q.device)
    inputs = (("q", q), ("k", k), ("v", v), ("cu_seqlens_qo", cu_seqlens_qo), ("cu_seqlens_kv", cu_seqlens_kv))
    if out is not None:
        V.output("out", out, *inputs, ("lse", lse))
    if lse is not None:
        V.output("lse", lse, *inputs)
    o, l_ = _dispatch.run("varlen_attention", q.device, q, k, v, cu_seqlens_qo, cu_seqlens_kv, scale, causal)
    if out is not None:
        o = out.copy_(o)
    if lse is not None:
        l_ = lse.copy_(l_)
    return o, l_


def _flash_attn_varlen_backward(do, q, k, v, out, lse, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo, max_seqlen_kv,
                                dq=None, dk=None, dv=None, causal=False, softmax_scale=None, is_varlen=True):
    """Upstream's private backward: ``(dq, dk, dv)``, written into ``dq`` / ``dk`` / ``dv`` when given; needs
    h_q == h_kv as upstream (through the reference's autograd here)."""
    scale = _check_varlen(q, k, v, cu_seqlens_qo, cu_seqlens_kv, 0.0, False, softmax_scale)
    causal = check.flag("causal", causal)
    if q.shape[1] != k.shape[1]:
        raise V.fail("k", f"h_kv == h_q ({q.shape[1]}) in flash_attn_varlen backward, as upstream", f"h_kv {k.shape[1]}")
    _out_buffer(do, "do", (q.shape[0], q.shape[1], v.shape[-1]), q.dtype, q.device)
    buffers = (("dq", dq, q), ("dk", dk, k), ("dv", dv, v))
    inputs = (("do", do), ("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse), ("cu_seqlens_qo", cu_seqlens_qo),
              ("cu_seqlens_kv", cu_seqlens_kv))
    for i, (name, buf, like) in enumerate(buffers):
        if buf is not None:
            _out_buffer(buf, name, tuple(like.shape), like.dtype, like.device)
            V.output(name, buf, *inputs, *((n, b) for n, b, _ in buffers[i + 1:]))
    with torch.enable_grad():
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        o, _ = reference.varlen_attention(qq, kk, vv, cu_seqlens_qo, cu_seqlens_kv, scale, causal)
        grads = torch.autograd.grad(o, (qq, kk, vv), do)
    return tuple(g if buf is None else buf.copy_(g) for g, buf in zip(grads, (dq, dk, dv), strict=True))


class FlashAttnVarlenFunc(torch.autograd.Function):
    """Upstream's autograd function: ``apply(q, k, v, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo,
    max_seqlen_kv, causal, softmax_scale, is_varlen)`` -> ``(out, lse)``; lse is not differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo, max_seqlen_kv, causal=False,
                softmax_scale=None, is_varlen=True):
        out, lse = _flash_attn_varlen_forward(q, k, v, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo, max_seqlen_kv,
                                              causal=causal, softmax_scale=softmax_scale, is_varlen=is_varlen)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_qo, cu_seqlens_kv)
        ctx.args = (max_seqlen_qo, max_seqlen_kv, causal, softmax_scale, is_varlen)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, _d_lse):
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        max_q, max_k, causal, scale, is_varlen = ctx.args
        dq, dk, dv = _flash_attn_varlen_backward(d_out.contiguous(), q, k, v, out, lse, cu_q, cu_k, max_q, max_k,
                                                 causal=causal, softmax_scale=scale, is_varlen=is_varlen)
        return dq, dk, dv, None, None, None, None, None, None, None


def flash_attn_varlen_func(q, k, v, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo, max_seqlen_kv, dropout_p=0.0,
                           softmax_scale=None, causal=False, deterministic=False, is_varlen=True):
    """Dense MHA/GQA prefill over packed variable-length sequences: out [total_q, h_q, d_v] and
    lse fp32 [total_q, h_q] (natural log, stride(0) == 1); causal is bottom-right aligned."""
    _check_varlen(q, k, v, cu_seqlens_qo, cu_seqlens_kv, dropout_p, deterministic, softmax_scale)
    return FlashAttnVarlenFunc.apply(q, k, v, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo, max_seqlen_kv,
                                     check.flag("causal", causal), softmax_scale, is_varlen)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, head_dim_qk, dropout_p=0.0, softmax_scale=None,
                                     causal=False, deterministic=False, is_varlen=True):
    """``qkv[..., :d]``, ``[..., d:2d]`` and ``[..., 2d:]`` are q, k and v (last-dim packing)."""
    d = head_dim_qk
    return flash_attn_varlen_func(qkv[:, :, :d], qkv[:, :, d:2 * d], qkv[:, :, 2 * d:], cu_seqlens, cu_seqlens,
                                  max_seqlen, max_seqlen, dropout_p, softmax_scale, causal, deterministic, is_varlen)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo, max_seqlen_kv, head_dim_qk,
                                    dropout_p=0.0, softmax_scale=None, causal=False, deterministic=False,
                                    is_varlen=True):
    """``kv[..., :head_dim_qk]`` is k, the rest v."""
    return flash_attn_varlen_func(q, kv[:, :, :head_dim_qk], kv[:, :, head_dim_qk:], cu_seqlens_qo, cu_seqlens_kv,
                                  max_seqlen_qo, max_seqlen_kv, dropout_p, softmax_scale, causal, deterministic,
                                  is_varlen)


# ---- the public functions under torch.compile -------------------------------------------------------
# While Dynamo traces, the two attention entry points call their torch.ops forms (deepjit.torch_library.traced_as):
# the checks run inside the op at run time. The schedule object is not consulted there (it holds no data the
# kernels read on these backends).
def _compiled_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata, num_splits=None,
                           softmax_scale=None, causal=False, is_fp8_kvcache=True, indices=None, attn_sink=None,
                           extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None, extra_topk_length=None,
                           enable_batch_invariant=False, *, kv_layout=None):
    sm_scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    if indices is None:
        out, lse, _, _ = torch.ops.flash_mla.dense_decode_fwd(q, k_cache, head_dim_v, cache_seqlens, block_table,
                                                              sm_scale, causal)
        return out, lse
    if kv_layout not in (None, "interleaved"):
        raise ValueError(f"kv_layout: expected None or 'interleaved' under torch.compile, got {kv_layout!r}")
    out, lse, _, _ = torch.ops.flash_mla.sparse_decode_fwd(q, k_cache, indices, topk_length, attn_sink, None, None,
                                                           extra_k_cache, extra_indices_in_kvcache, extra_topk_length,
                                                           head_dim_v, sm_scale)
    return out, lse


def _compiled_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None):
    return torch.ops.flash_mla.sparse_prefill_fwd(q, kv, indices, sm_scale, d_v, attn_sink, topk_length)


def _compiled_varlen(q, k, v, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo, max_seqlen_kv, dropout_p=0.0,
                     softmax_scale=None, causal=False, deterministic=False, is_varlen=True):
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        # the op form is forward-only (an op writing out/lse has no autograd formula): training takes the
        # autograd function, with a graph break
        return _varlen_eager(q, k, v, cu_seqlens_qo, cu_seqlens_kv, max_seqlen_qo, max_seqlen_kv, dropout_p,
                             softmax_scale, causal, deterministic, is_varlen)
    if dropout_p != 0.0 or deterministic:
        raise ValueError(f"dropout_p / deterministic: expected 0.0 / False, got {dropout_p!r} / {deterministic!r}")
    out = q.new_empty(q.shape[0], q.shape[1], v.shape[-1])
    lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32, device=q.device).t()   # head-major, as upstream
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    torch.ops.flash_mla.dense_prefill_fwd(q.new_empty(0), q, k, v, cu_seqlens_qo, cu_seqlens_kv, out, lse,
                                          1 if causal else 0, scale, max_seqlen_qo, max_seqlen_kv, is_varlen)
    return out, lse


_varlen_eager = flash_attn_varlen_func
flash_attn_varlen_func = traced_as(flash_attn_varlen_func, _compiled_varlen)
flash_mla_with_kvcache = traced_as(flash_mla_with_kvcache, _compiled_with_kvcache)
flash_mla_sparse_fwd = traced_as(flash_mla_sparse_fwd, _compiled_sparse_fwd)
