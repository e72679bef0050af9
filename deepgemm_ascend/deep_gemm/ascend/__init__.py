"""deep_gemm's hand-written AscendC kernels for Ascend 950 (dav-3510), written against the AscendC
C API (``c_api/asc_simd.h`` and the SIMT API), compiled at run time by deepjit
(``KernelLibrary.ascend_kernel``: bisheng + ld.lld for NPU tensors, the Ascend CPU twin for CPU
tensors) with shape and layout specialisation through defines.

Entry points take the canonical, already-validated arguments of the matching
``deep_gemm.reference`` function (the public wrappers in ``deep_gemm.gemm`` / ``deep_gemm.grouped``
do the checks and the nn/tn/tt transposed views):

- ``bf16_gemm.bf16_gemm_nt(a, b, d, c=None, alpha=None, compiled_dims="nk")`` serves
  ``bf16_gemm_{nt,nn,tn,tt}``: cube kernel ``bf16_gemm.asc``, or the mixed kernel
  ``bf16_gemm_epilogue.asc`` when ``c`` or ``alpha`` is given.
- ``m_grouped_bf16_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, rows, zero_padding,
  compiled_dims="nk")`` serves ``m_grouped_bf16_gemm_{nt,nn}_contiguous`` with the psum layout
  (``m_grouped_bf16_gemm.asc``); the ``m_indices`` form raises ``NotImplementedError``.
- ``k_grouped_bf16_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, c, groups, compiled_dims="mn")``
  serves ``k_grouped_bf16_gemm_tn_contiguous`` (``bf16_gemm_epilogue.asc`` with ``DG_K_GROUPED``).

- ``fp8_mx_gemm.fp8_gemm_nt(a, b, d, c=None, alpha=None, compiled_dims="nk")`` serves
  ``fp8_fp4_gemm_nt`` for E4M3 x E4M3, K-major, recipe ``(1, 1, 32)`` (``fp8_mx_gemm.asc``,
  ``asc_mmad_mx``); other forms, ``c`` and ``alpha`` raise ``NotImplementedError`` up front.

- ``mqa_logits.mqa_logits(q, kv, weights, ks, ke, logits, compressed, clean_logits)`` serves
  ``fp8_mqa_logits`` / ``fp8_fp4_mqa_logits`` (unscaled E4M3 q, per-token-scaled KV) and
  ``paged_mqa_logits.paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, logits,
  clean_logits)`` the paged forms: mixed kernels ``mqa_logits.asc`` / ``paged_mqa_logits.asc`` (shared
  pieces in ``mqa_logits.h``), Q.K on the cube, ReLU x weights and the head sum on SIMT lanes.
- ``sf_layout.transform_sf(sf, mn, k_blocks, gran_mn, grouping, ends, alignment)``: the vector kernel
  ``sf_layout.asc`` behind ``transform_sf_into_required_layout`` and
  ``transform_k_grouped_sf_into_required_layout`` on the Ascend path.
- ``codegen.cases()``: every kernel above at one shape, for ``make ascend-check``.

Shared pieces: ``cube_gemm.h`` (the cube pipeline for one output tile and the FixPipe stores),
``_launch.py`` (kernel handles, grid sizing, compile-time dimensions).
"""
