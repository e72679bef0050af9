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

from deepjit.torch_library import OpLibrary, returns_nothing, traced_as

# The package's public functions, looked up at call time: ``deep_gemm/__init__.py`` imports this module
# before it binds the legacy aliases (``fp8_gemm_nt`` ...).
_api = sys.modules[__package__]
LIB = OpLibrary("deep_gemm")
_op = LIB.op



def _late(name: str):
    def call(*args, **kwargs):
        return getattr(_api, name)(*args, **kwargs)
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
    _api.k_grouped_bf16_gemm_tn_contiguous(a, b, d, None if ks_cpu is None else list(ks_cpu), grouped_layout, c,
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
    return _api.fp8_fp4_mqa_logits((q, q_sf), (kv, kv_sf), weights, ks, ke, clean_logits, max_seqlen_k,
                                   logits_dtype or torch.float32).clone()


def _mqa_logits_meta(q, q_sf, kv, kv_sf, weights, ks, ke, clean_logits=True, max_seqlen_k=0, logits_dtype=None):
    return q.new_empty((q.shape[0], max_seqlen_k if max_seqlen_k > 0 else kv.shape[0]),
                       dtype=logits_dtype or torch.float32)


def _paged_logits(q, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                  clean_logits=False, logits_dtype=None, indices=None):
    return _api.fp8_fp4_paged_mqa_logits((q, q_sf), kv_cache, weights, context_lens, block_table,
                                         schedule_meta, max_context_len, clean_logits,
                                         logits_dtype or torch.float32, indices).clone()


def _paged_logits_meta(q, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                       clean_logits=False, logits_dtype=None, indices=None):
    return q.new_empty((q.shape[0] * q.shape[1], max_context_len), dtype=logits_dtype or torch.float32)


def _metadata_meta(context_lens, block_kv, num_sms, indices=None):
    return context_lens.new_empty((num_sms + 1, 2), dtype=torch.int32)


_op("fp8_fp4_mqa_logits(Tensor q, Tensor? q_sf, Tensor kv, Tensor kv_sf, Tensor weights, Tensor cu_seq_len_k_start, "
    "Tensor cu_seq_len_k_end, bool clean_logits=True, int max_seqlen_k=0, ScalarType? logits_dtype=None) -> Tensor",
    _mqa_logits, _mqa_logits_meta)
_op("fp8_fp4_paged_mqa_logits(Tensor q, Tensor? q_sf, Tensor kv_cache, Tensor weights, Tensor context_lens, "
    "Tensor block_table, Tensor schedule_meta, int max_context_len, bool clean_logits=False, "
    "ScalarType? logits_dtype=None, Tensor? indices=None) -> Tensor", _paged_logits, _paged_logits_meta)
_op("get_paged_mqa_logits_metadata(Tensor context_lens, int block_kv, int num_sms, Tensor? indices=None) -> Tensor",
    _late("get_paged_mqa_logits_metadata"), _metadata_meta)


# ---- scale-factor layouts ---------------------------------------------------------------------
def _stand_in(t):
    """A CPU tensor of ``t``'s shape whose values every layout function accepts (ones: a power-of-two
    scale; as UE8M0 / int bytes a valid exponent), so a meta kernel can read the output's shape and
    strides off a real run. Scale factors are small (one per 128 or 32 elements of a row). Static
    shapes only: a size traced as a symbol has no stand-in."""
    return None if t is None else torch.ones(t.shape, dtype=t.dtype)


def _like(out: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device="meta")


def _transform_sf(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False, psum_layout=None):
    out = _api.transform_sf_into_required_layout(sf, mn, k, tuple(recipe), num_groups, is_sfa, disable_ue8m0_cast,
                                                 psum_layout)
    if out.untyped_storage().data_ptr() == sf.untyped_storage().data_ptr():
        # already in the required layout: an op's output may not alias its input, so a copy, strides kept
        out = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device=out.device).copy_(out)
    return out


def _transform_sf_meta(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False, psum_layout=None):
    # psum_layout only zeroes the gap rows: the output's shape does not depend on it. The stand-in run
    # is real CPU work: outside the fake-tensor mode tracing this call, and outside its redirection of
    # every op to the Meta kernels.
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    meta_tls = torch._C._meta_in_tls_dispatch_include()
    with unset_fake_temporarily():
        torch._C._set_meta_in_tls_dispatch_include(False)
        try:
            out = _transform_sf(_stand_in(sf), mn, k, recipe, num_groups, is_sfa, disable_ue8m0_cast)
        finally:
            torch._C._set_meta_in_tls_dispatch_include(meta_tls)
    return _like(out)


_op("transform_sf_into_required_layout(Tensor sf, int mn, int k, int[] recipe, int? num_groups=None, "
    "bool? is_sfa=None, bool disable_ue8m0_cast=False, Tensor? psum_layout=None) -> Tensor",
    _transform_sf, _transform_sf_meta)


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
    for name, call_op in routes.items():
        setattr(_api, name, traced_as(getattr(_api, name), call_op))


_route_compiled()
