"""The public ops as ``torch.ops.deep_gemm.*`` (``torch.library`` ops), so ``torch.compile`` traces a model
calling them: each has a meta implementation for shape inference, and an op writing into a caller's tensor
declares it mutated (``Tensor(a!)``). Upstream registers its ops under the same names; a ``(data, scales)``
pair argument is two tensors here (schemas have no tuples). Imported by ``deep_gemm``: explicit schemas and
Meta kernels keep registration under a millisecond (``register_fake`` would cost a quarter second)."""
from __future__ import annotations

import torch

from .attention import fp8_fp4_mqa_logits, get_paged_mqa_logits_metadata
from .gemm import bf16_gemm_nt, fp8_fp4_gemm_nt
from .grouped import m_grouped_bf16_gemm_nt_contiguous

LIB = torch.library.Library("deep_gemm", "FRAGMENT")


def _op(schema: str, impl, meta) -> None:
    name = schema.split("(", 1)[0]
    LIB.define(schema)
    LIB.impl(name, impl, "CompositeExplicitAutograd")
    LIB.impl(name, meta, "Meta")


def _returns_nothing(*args, **kwargs) -> None:
    return None


def _fp8_fp4_gemm_nt(a, sfa, b, sfb, d, c=None, recipe=None, compiled_dims="nk", disable_ue8m0_cast=False,
                     alpha=None) -> None:
    fp8_fp4_gemm_nt((a, sfa), (b, sfb), d, c, None if recipe is None else tuple(recipe), compiled_dims=compiled_dims,
                    disable_ue8m0_cast=disable_ue8m0_cast, alpha=alpha)


def _mqa_logits(q, q_sf, kv, kv_sf, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=None):
    # an op returns its own storage, not a view of a padded buffer: the rows are copied out
    return fp8_fp4_mqa_logits((q, q_sf), (kv, kv_sf), weights, ks, ke, clean_logits, max_seqlen_k,
                              logits_dtype or torch.float32).clone()


def _mqa_logits_meta(q, q_sf, kv, kv_sf, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=None):
    return q.new_empty((q.shape[0], max_seqlen_k if max_seqlen_k > 0 else kv.shape[0]),
                       dtype=logits_dtype or torch.float32)


def _metadata_meta(context_lens, block_kv, num_sms, indices=None):
    return context_lens.new_empty((num_sms + 1, 2), dtype=torch.int32)


_op("bf16_gemm_nt(Tensor a, Tensor b, Tensor(a!) d, Tensor? c=None, str compiled_dims=\"nk\", float? alpha=None) -> ()",
    bf16_gemm_nt, _returns_nothing)
_op("fp8_fp4_gemm_nt(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor? c=None, int[]? recipe=None, "
    "str compiled_dims=\"nk\", bool disable_ue8m0_cast=False, float? alpha=None) -> ()",
    _fp8_fp4_gemm_nt, _returns_nothing)
_op("m_grouped_bf16_gemm_nt_contiguous(Tensor a, Tensor b, Tensor(a!) d, Tensor grouped_layout, "
    "str compiled_dims=\"nk\", bool use_psum_layout=False, bool ensure_zero_padding=True, "
    "int? expected_m_for_psum_layout=None) -> ()", m_grouped_bf16_gemm_nt_contiguous, _returns_nothing)
_op("fp8_fp4_mqa_logits(Tensor q, Tensor? q_sf, Tensor kv, Tensor kv_sf, Tensor weights, Tensor cu_seq_len_k_start, "
    "Tensor cu_seq_len_k_end, bool clean_logits=True, int max_seqlen_k=0, ScalarType? logits_dtype=None) -> Tensor",
    _mqa_logits, _mqa_logits_meta)
_op("get_paged_mqa_logits_metadata(Tensor context_lens, int block_kv, int num_sms, Tensor? indices=None) -> Tensor",
    get_paged_mqa_logits_metadata, _metadata_meta)
