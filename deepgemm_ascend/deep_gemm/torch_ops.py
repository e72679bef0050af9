"""The public ops as ``torch.ops.deep_gemm.*`` (``torch.library`` ops), so ``torch.compile`` traces a model
calling them: each has a meta implementation for shape inference, and an op writing into a caller's tensor
declares it mutated (``Tensor(a!)``). The names are upstream's Python function names (its CUDA and Ascend
builds bind through pybind11 and register no torch library); a ``(data, scales)`` pair argument is two
tensors here (schemas have no tuples; ``q_sf=None`` for an FP8 query), ``recipe`` a list. Imported by
``deep_gemm``: explicit schemas and Meta kernels keep registration to a few milliseconds (``register_fake``
would cost a quarter second)."""
from __future__ import annotations

import sys

import torch

from deepjit.torch_library import OpLibrary, meta_from_stand_ins, returns_nothing, traced_as

# The package's public functions, looked up at call time: ``deep_gemm/__init__.py`` imports this module
# before it binds the legacy aliases (``fp8_gemm_nt`` ...).
_api = sys.modules[__package__]
OPS = OpLibrary("deep_gemm")
_op = OPS.op



def _eager(name: str):
    """The public function ``name`` itself, never its route to the op (the op's kernels call this)."""
    fn = getattr(_api, name)
    return getattr(fn, "eager", fn)


def _late(name: str):
    def call(*args, **kwargs):
        return _eager(name)(*args, **kwargs)
    return call


def _tuple(recipe):
    return None if recipe is None else tuple(recipe)


# ---- dense GEMMs ------------------------------------------------------------------------------
_SCALED = ("Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor? c=None, int[]? recipe=None, "
           "int[]? recipe_a=None, int[]? recipe_b=None, str compiled_dims=\"{dims}\", bool disable_ue8m0_cast=False, "
           "float? alpha=None")


def _scaled_gemm(fn):
    def impl(a, sfa, b, sfb, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="nk",
             disable_ue8m0_cast=False, alpha=None):
        fn((a, sfa), (b, sfb), d, c, _tuple(recipe), _tuple(recipe_a), _tuple(recipe_b), compiled_dims=compiled_dims,
           disable_ue8m0_cast=disable_ue8m0_cast, alpha=alpha)
    return impl


def _bf16_gemm(fn):
    def impl(a, b, d, c=None, compiled_dims="nk", alpha=None):
        fn(a, b, d, c, compiled_dims=compiled_dims, alpha=alpha)
    return impl


for _layout in ("nt", "nn", "tn", "tt"):
    _dims = "nk" if _layout[0] == "n" else "mn"
    for _prefix in ("fp8_fp4", "fp8"):
        _op(f"{_prefix}_gemm_{_layout}({_SCALED.format(dims=_dims)}) -> ()",
            _scaled_gemm(_late(f"{_prefix}_gemm_{_layout}")), returns_nothing)
    _op(f"bf16_gemm_{_layout}(Tensor a, Tensor b, Tensor(a!) d, Tensor? c=None, str compiled_dims=\"{_dims}\", "
        "float? alpha=None) -> ()", _bf16_gemm(_late(f"bf16_gemm_{_layout}")), returns_nothing)


# ---- M-grouped (contiguous, masked) and K-grouped GEMMs -------------------------------------------
def _m_grouped_scaled(fn):
    def impl(a, sfa, b, sfb, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="nk",
             disable_ue8m0_cast=False, use_psum_layout=None, ensure_zero_padding=True,
             expected_m_for_psum_layout=None):
        fn((a, sfa), (b, sfb), d, grouped_layout, _tuple(recipe), _tuple(recipe_a), _tuple(recipe_b),
           compiled_dims=compiled_dims, disable_ue8m0_cast=disable_ue8m0_cast, use_psum_layout=use_psum_layout,
           ensure_zero_padding=ensure_zero_padding, expected_m_for_psum_layout=expected_m_for_psum_layout)
    return impl


def _masked_scaled(fn):
    def impl(a, sfa, b, sfb, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="nk",
             disable_ue8m0_cast=False):
        fn((a, sfa), (b, sfb), d, masked_m, expected_m, _tuple(recipe), _tuple(recipe_a), _tuple(recipe_b),
           compiled_dims=compiled_dims, disable_ue8m0_cast=disable_ue8m0_cast)
    return impl


def _k_grouped_scaled(fn):
    def impl(a, sfa, b, sfb, d, ks_cpu, grouped_layout, c=None, recipe=(1, 1, 128), compiled_dims="mn",
             use_psum_layout=None):
        fn((a, sfa), (b, sfb), d, None if ks_cpu is None else list(ks_cpu), grouped_layout, c, _tuple(recipe),
           compiled_dims=compiled_dims, use_psum_layout=use_psum_layout)
    return impl


def _k_grouped_bf16(a, b, d, ks_cpu, grouped_layout, c=None, compiled_dims="mn", use_psum_layout=None):
    _eager("k_grouped_bf16_gemm_tn_contiguous")(a, b, d, None if ks_cpu is None else list(ks_cpu), grouped_layout, c,
                                           compiled_dims=compiled_dims, use_psum_layout=use_psum_layout)


_CONTIGUOUS_TAIL = ("str compiled_dims=\"nk\", bool? use_psum_layout=None, bool ensure_zero_padding=True, "
                    "int? expected_m_for_psum_layout=None")
_RECIPES = "int[]? recipe=None, int[]? recipe_a=None, int[]? recipe_b=None"
for _layout in ("nt", "nn"):
    for _prefix in ("fp8_fp4", "fp8"):
        _name = f"m_grouped_{_prefix}_gemm_{_layout}_contiguous"
        _op(f"{_name}(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor grouped_layout, {_RECIPES}, "
            f"str compiled_dims=\"nk\", bool disable_ue8m0_cast=False, bool? use_psum_layout=None, "
            f"bool ensure_zero_padding=True, int? expected_m_for_psum_layout=None) -> ()",
            _m_grouped_scaled(_late(_name)), returns_nothing)
    _name = f"m_grouped_bf16_gemm_{_layout}_contiguous"
    _op(f"{_name}(Tensor a, Tensor b, Tensor(a!) d, Tensor grouped_layout, {_CONTIGUOUS_TAIL}) -> ()",
        _late(_name), returns_nothing)
for _prefix in ("fp8_fp4", "fp8"):
    _name = f"m_grouped_{_prefix}_gemm_nt_masked"
    _op(f"{_name}(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor masked_m, int expected_m, "
        f"{_RECIPES}, str compiled_dims=\"nk\", bool disable_ue8m0_cast=False) -> ()",
        _masked_scaled(_late(_name)), returns_nothing)
_op("m_grouped_bf16_gemm_nt_masked(Tensor a, Tensor b, Tensor(a!) d, Tensor masked_m, int expected_m, "
    "str compiled_dims=\"nk\") -> ()", _late("m_grouped_bf16_gemm_nt_masked"), returns_nothing)
for _layout in ("tn", "nt"):
    _name = f"k_grouped_fp8_gemm_{_layout}_contiguous"
    _op(f"{_name}(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, int[]? ks_cpu, Tensor grouped_layout, "
        "Tensor? c=None, int[] recipe=[1, 1, 128], str compiled_dims=\"mn\", bool? use_psum_layout=None) -> ()",
        _k_grouped_scaled(_late(_name)), returns_nothing)
_op("k_grouped_bf16_gemm_tn_contiguous(Tensor a, Tensor b, Tensor(a!) d, int[]? ks_cpu, Tensor grouped_layout, "
    "Tensor? c=None, str compiled_dims=\"mn\", bool? use_psum_layout=None) -> ()", _k_grouped_bf16, returns_nothing)


# ---- MQA logits -------------------------------------------------------------------------------
def _mqa_logits(q, q_sf, kv, kv_sf, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=None):
    # an op returns its own storage, not a view of a padded buffer: the rows are copied out
    return _eager("fp8_fp4_mqa_logits")((q, q_sf), (kv, kv_sf), weights, ks, ke, clean_logits, max_seqlen_k,
                                   logits_dtype or torch.float32).clone()


def _mqa_logits_meta(q, q_sf, kv, kv_sf, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=None):
    return q.new_empty((q.shape[0], max_seqlen_k if max_seqlen_k > 0 else kv.shape[0]),
                       dtype=logits_dtype or torch.float32)


def _paged_logits(q, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                  clean_logits=False, logits_dtype=None, indices=None, use_ascend_kv_layout=False):
    return _eager("fp8_fp4_paged_mqa_logits")((q, q_sf), kv_cache, weights, context_lens, block_table,
                                         schedule_meta, max_context_len, clean_logits,
                                         logits_dtype or torch.float32, indices, use_ascend_kv_layout).clone()


def _paged_logits_meta(q, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                       clean_logits=False, logits_dtype=None, indices=None, use_ascend_kv_layout=False):
    return q.new_empty((q.shape[0] * q.shape[1], max_context_len), dtype=logits_dtype or torch.float32)


def _metadata_meta(context_lens, block_kv, num_sms, indices=None):
    return context_lens.new_empty((num_sms + 1, 2), dtype=torch.int32)


_op("fp8_fp4_mqa_logits(Tensor q, Tensor? q_sf, Tensor kv, Tensor kv_sf, Tensor weights, Tensor cu_seq_len_k_start, "
    "Tensor cu_seq_len_k_end, bool clean_logits=True, int max_seqlen_k=0, ScalarType? logits_dtype=None) -> Tensor",
    _mqa_logits, _mqa_logits_meta)
_op("fp8_fp4_paged_mqa_logits(Tensor q, Tensor? q_sf, Tensor kv_cache, Tensor weights, Tensor context_lens, "
    "Tensor block_table, Tensor schedule_meta, int max_context_len, bool clean_logits=False, "
    "ScalarType? logits_dtype=None, Tensor? indices=None, bool use_ascend_kv_layout=False) -> Tensor", _paged_logits,
    _paged_logits_meta)
_op("get_paged_mqa_logits_metadata(Tensor context_lens, int block_kv, int num_sms, Tensor? indices=None) -> Tensor",
    _late("get_paged_mqa_logits_metadata"), _metadata_meta)


# ---- scale-factor layouts ---------------------------------------------------------------------
def _transform_sf(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False, psum_layout=None):
    out = _eager("transform_sf_into_required_layout")(sf, mn, k, tuple(recipe), num_groups, is_sfa, disable_ue8m0_cast,
                                                 psum_layout)
    if out.untyped_storage().data_ptr() == sf.untyped_storage().data_ptr():
        # already in the required layout: an op's output may not alias its input, so a copy, strides kept
        out = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device=out.device).copy_(out)
    return out


def _transform_sf_meta(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False, psum_layout=None):
    # psum_layout only zeroes the gap rows: the output's shape does not depend on it.
    return meta_from_stand_ins(_transform_sf, sf, mn, k, recipe, num_groups, is_sfa, disable_ue8m0_cast)


_op("transform_sf_into_required_layout(Tensor sf, int mn, int k, int[] recipe, int? num_groups=None, "
    "bool? is_sfa=None, bool disable_ue8m0_cast=False, Tensor? psum_layout=None) -> Tensor",
    _transform_sf, _transform_sf_meta)


# ---- einsum forms, HC pre-norm GEMM, head-splitting GEMM ------------------------------------------------
# ``c_is_d``: the in-place accumulation ``c=d`` as a flag. A functionalised graph hands a mutated argument over
# as a copy, so ``c`` and ``d`` would no longer be one tensor inside the op.
def _einsum(expr, a, b, d, c=None, use_cublaslt=False, c_is_d=False):
    _eager("einsum")(expr, a, b, d, d if c_is_d else c, use_cublaslt)


def _fp8_einsum(expr, a, sfa, b, sfb, d, c=None, recipe=(1, 128, 128), c_is_d=False):
    _eager("fp8_einsum")(expr, (a, sfa), (b, sfb), d, d if c_is_d else c, tuple(recipe))


def _skip_head_mid(a, sfa, b, sfb, d, head_splits, recipe=None, compiled_dims="nk", disable_ue8m0_cast=False):
    _eager("fp8_gemm_nt_skip_head_mid")((a, sfa), (b, sfb), d, tuple(head_splits), _tuple(recipe), compiled_dims,
                                         disable_ue8m0_cast)


_op("einsum(str expr, Tensor a, Tensor b, Tensor(a!) d, Tensor? c=None, bool use_cublaslt=False, "
    "bool c_is_d=False) -> ()", _einsum, returns_nothing)
_op("fp8_einsum(str expr, Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, Tensor? c=None, "
    "int[] recipe=[1, 128, 128], bool c_is_d=False) -> ()", _fp8_einsum, returns_nothing)
_op("tf32_hc_prenorm_gemm(Tensor a, Tensor b, Tensor(a!) d, Tensor(b!) sqr_sum, int? num_splits=None) -> ()",
    lambda a, b, d, sqr_sum, num_splits=None: _eager("tf32_hc_prenorm_gemm")(a, b, d, sqr_sum, num_splits),
    returns_nothing)
_op("fp8_gemm_nt_skip_head_mid(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a!) d, int[] head_splits, "
    "int[]? recipe=None, str compiled_dims=\"nk\", bool disable_ue8m0_cast=False) -> ()", _skip_head_mid,
    returns_nothing)


# ---- scale-factor layout helpers ------------------------------------------------------------------
def _own(out: torch.Tensor, *inputs) -> torch.Tensor:
    """An op's output may not alias an input: a copy (strides kept) where a helper returned its input."""
    if any(t is not None and out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() for t in inputs):
        out = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device=out.device).copy_(out)
    return out


def _stand_in_meta(fn):
    """A Meta kernel reading the output's shape and strides off ``fn`` run on stand-ins."""
    return lambda *args: meta_from_stand_ins(fn, *args)


def _mn_major(sf):
    return _own(_eager("get_mn_major_tma_aligned_tensor")(sf), sf)


def _mn_major_packed(sf, psum_layout=None):
    return _eager("get_mn_major_tma_aligned_packed_ue8m0_tensor")(sf, psum_layout)


def _k_grouped_packed(sf, grouped_layout, ks_cpu, gran_k, k_alignment, use_psum_layout=False):
    return _eager("get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor")(
        sf, grouped_layout, None if ks_cpu is None else list(ks_cpu), gran_k, k_alignment, use_psum_layout)


def _k_grouped_packed_meta(sf, grouped_layout, ks_cpu, gran_k, k_alignment, use_psum_layout=False):
    # the row count comes from ks_cpu (a host list: static) or, psum without it, from the shapes alone
    if ks_cpu:
        from .utils.math import ceil_div
        rows = sum(ceil_div(k, 4 * gran_k) if use_psum_layout else ceil_div(ceil_div(k, gran_k), 4) for k in ks_cpu)
    else:
        rows = (sf.shape[0] + 3 * grouped_layout.numel()) // 4
    return sf.new_empty((rows, sf.shape[1]), dtype=torch.int32)


def _k_grouped_transform(sf, mn, k, recipe, is_sfa, psum_layout):
    return _eager("transform_k_grouped_sf_into_required_layout")(sf, mn, k, tuple(recipe), is_sfa, psum_layout)


def _k_grouped_transform_meta(sf, mn, k, recipe, is_sfa, psum_layout):
    words = -(-k // 64)          # int16 [mn, ceil(k/64)] MN-major, no padding
    return torch.empty_strided((mn, words), (1, mn), dtype=torch.int16, device="meta")


_op("get_mn_major_tma_aligned_tensor(Tensor sf) -> Tensor", _mn_major, _stand_in_meta(_mn_major))
_op("get_mn_major_tma_aligned_packed_ue8m0_tensor(Tensor sf, Tensor? psum_layout=None) -> Tensor", _mn_major_packed,
    _stand_in_meta(lambda sf, psum_layout=None: _mn_major_packed(sf)))
_op("get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(Tensor sf, Tensor grouped_layout, int[]? ks_cpu, "
    "int gran_k, int k_alignment, bool use_psum_layout=False) -> Tensor", _k_grouped_packed, _k_grouped_packed_meta)
_op("transform_k_grouped_sf_into_required_layout(Tensor sf, int mn, int k, int[] recipe, bool? is_sfa, "
    "Tensor psum_layout) -> Tensor", _k_grouped_transform, _k_grouped_transform_meta)


# ---- the public functions under torch.compile -------------------------------------------------------
# While Dynamo traces, each public GEMM calls its torch.ops form (deepjit.torch_library.traced_as): the checks
# (data pointers for aliasing, layout values) then run inside the op's eager kernel, not in the trace.
def _list(recipe):
    return None if recipe is None else list(recipe)


def _no_epilogue(epilogue) -> None:
    if epilogue is not None:
        raise ValueError("epilogue: expected None (fused epilogues are not available on this backend), got "
                         f"{type(epilogue).__name__}")


def _compiled_scaled_gemm(op):
    def call(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims=None,
             disable_ue8m0_cast=False, alpha=None, epilogue=None):
        _no_epilogue(epilogue)
        extra = {} if compiled_dims is None else {"compiled_dims": compiled_dims}
        op(a[0], a[1], b[0], b[1], d, c, _list(recipe), _list(recipe_a), _list(recipe_b),
           disable_ue8m0_cast=disable_ue8m0_cast, alpha=alpha, **extra)
    return call


def _compiled_bf16_gemm(op):
    def call(a, b, d, c=None, compiled_dims=None, alpha=None, epilogue=None):
        _no_epilogue(epilogue)
        op(a, b, d, c, alpha=alpha, **({} if compiled_dims is None else {"compiled_dims": compiled_dims}))
    return call


def _compiled_m_grouped_scaled(op):
    def call(a, b, d, grouped_layout=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="nk",
             disable_ue8m0_cast=False, use_psum_layout=None, ensure_zero_padding=True,
             expected_m_for_psum_layout=None, epilogue=None, *, m_indices=None):
        _no_epilogue(epilogue)
        op(a[0], a[1], b[0], b[1], d, m_indices if grouped_layout is None else grouped_layout, _list(recipe),
           _list(recipe_a), _list(recipe_b), compiled_dims, disable_ue8m0_cast, use_psum_layout,
           ensure_zero_padding, expected_m_for_psum_layout)
    return call


def _compiled_m_grouped_bf16(op):
    def call(a, b, d, grouped_layout=None, compiled_dims="nk", use_psum_layout=None, ensure_zero_padding=True,
             expected_m_for_psum_layout=None, *, m_indices=None):
        op(a, b, d, m_indices if grouped_layout is None else grouped_layout, compiled_dims, use_psum_layout,
           ensure_zero_padding, expected_m_for_psum_layout)
    return call


def _compiled_masked_scaled(op):
    def call(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="nk",
             disable_ue8m0_cast=False):
        op(a[0], a[1], b[0], b[1], d, masked_m, expected_m, _list(recipe), _list(recipe_a), _list(recipe_b),
           compiled_dims, disable_ue8m0_cast)
    return call


def _compiled_k_grouped_scaled(op):
    def call(a, b, d, ks_cpu, grouped_layout, c=None, recipe=(1, 1, 128), compiled_dims="mn", use_psum_layout=None):
        op(a[0], a[1], b[0], b[1], d, _list(ks_cpu), grouped_layout, c, list(recipe), compiled_dims, use_psum_layout)
    return call


def _compiled_others(ops) -> dict:
    """Routes of the einsum forms, MQA logits, the paged schedule and the layout helpers."""
    def einsum(expr, a, b, d, c=None, use_cublaslt=False):
        ops.einsum(expr, a, b, d, None if c is d else c, use_cublaslt, c is d)

    def fp8_einsum(expr, a, b, d, c=None, recipe=(1, 128, 128)):
        ops.fp8_einsum(expr, a[0], a[1], b[0], b[1], d, None if c is d else c, list(recipe), c is d)

    def skip_head_mid(a, b, d, head_splits, recipe=None, compiled_dims="nk", disable_ue8m0_cast=False):
        ops.fp8_gemm_nt_skip_head_mid(a[0], a[1], b[0], b[1], d, list(head_splits), _list(recipe), compiled_dims,
                                      disable_ue8m0_cast)

    def mqa_logits(q, kv, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=torch.float32):
        return ops.fp8_fp4_mqa_logits(q[0], q[1], kv[0], kv[1], weights, ks, ke, clean_logits, max_seqlen_k,
                                      logits_dtype)

    def legacy_mqa_logits(q, kv, weights, ks, ke, clean_logits=True, max_seqlen_k=0):
        return ops.fp8_fp4_mqa_logits(q, None, kv[0], kv[1], weights, ks, ke, clean_logits, max_seqlen_k)

    def paged_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                     clean_logits=False, logits_dtype=torch.float32, indices=None, use_ascend_kv_layout=False):
        return ops.fp8_fp4_paged_mqa_logits(q[0], q[1], kv_cache, weights, context_lens, block_table, schedule_meta,
                                            max_context_len, clean_logits, logits_dtype, indices, use_ascend_kv_layout)

    def legacy_paged_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                            clean_logits=False, indices=None):
        return ops.fp8_fp4_paged_mqa_logits(q, None, kv_cache, weights, context_lens, block_table, schedule_meta,
                                            max_context_len, clean_logits, None, indices)

    def transform_sf(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False, psum_layout=None):
        return ops.transform_sf_into_required_layout(sf, mn, k, list(recipe), num_groups, is_sfa, disable_ue8m0_cast,
                                                     psum_layout)

    def k_grouped_packed(sf, grouped_layout, ks_cpu, gran_k, k_alignment, use_psum_layout=False):
        return ops.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, grouped_layout, _list(ks_cpu), gran_k,
                                                                         k_alignment, use_psum_layout)

    def k_grouped_transform(sf, mn, k, recipe, is_sfa, psum_layout):
        return ops.transform_k_grouped_sf_into_required_layout(sf, mn, k, list(recipe), is_sfa, psum_layout)

    return {"einsum": einsum, "fp8_einsum": fp8_einsum, "tf32_hc_prenorm_gemm": ops.tf32_hc_prenorm_gemm,
            "fp8_gemm_nt_skip_head_mid": skip_head_mid, "fp8_fp4_mqa_logits": mqa_logits,
            "fp8_mqa_logits": legacy_mqa_logits, "fp8_fp4_paged_mqa_logits": paged_logits,
            "fp8_paged_mqa_logits": legacy_paged_logits,
            "get_paged_mqa_logits_metadata": ops.get_paged_mqa_logits_metadata,
            "transform_sf_into_required_layout": transform_sf,
            "transform_k_grouped_sf_into_required_layout": k_grouped_transform,
            "get_mn_major_tma_aligned_tensor": ops.get_mn_major_tma_aligned_tensor,
            "get_mn_major_tma_aligned_packed_ue8m0_tensor": ops.get_mn_major_tma_aligned_packed_ue8m0_tensor,
            "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor": k_grouped_packed}


def _route_compiled() -> None:
    ops = torch.ops.deep_gemm
    routes = {}
    for layout in ("nt", "nn", "tn", "tt"):
        routes[f"fp8_fp4_gemm_{layout}"] = _compiled_scaled_gemm(getattr(ops, f"fp8_fp4_gemm_{layout}"))
        routes[f"bf16_gemm_{layout}"] = _compiled_bf16_gemm(getattr(ops, f"bf16_gemm_{layout}"))
    for layout in ("nt", "nn"):
        name = f"m_grouped_fp8_fp4_gemm_{layout}_contiguous"
        routes[name] = _compiled_m_grouped_scaled(getattr(ops, name))
        name = f"m_grouped_bf16_gemm_{layout}_contiguous"
        routes[name] = _compiled_m_grouped_bf16(getattr(ops, name))
    routes["m_grouped_fp8_fp4_gemm_nt_masked"] = _compiled_masked_scaled(ops.m_grouped_fp8_fp4_gemm_nt_masked)
    routes["m_grouped_bf16_gemm_nt_masked"] = ops.m_grouped_bf16_gemm_nt_masked
    for layout in ("tn", "nt"):
        name = f"k_grouped_fp8_gemm_{layout}_contiguous"
        routes[name] = _compiled_k_grouped_scaled(getattr(ops, name))
    routes["k_grouped_bf16_gemm_tn_contiguous"] = ops.k_grouped_bf16_gemm_tn_contiguous
    routes.update(_compiled_others(ops))
    for name, call_op in routes.items():
        public = traced_as(getattr(_api, name), call_op)
        for module in (_api, _api.utils, _api.utils.layout):   # the layout helpers are also utils' names
            if hasattr(module, name):
                setattr(module, name, public)


_route_compiled()
