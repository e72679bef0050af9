"""deep_gemm's hand-written AscendC kernels for Ascend 950 (dav-3510), written against the AscendC
C API (``c_api/asc_simd.h`` and the SIMT API), compiled at run time by deepjit
(``KernelLibrary.ascend_kernel``: bisheng + ld.lld for NPU tensors, the Ascend CPU twin for CPU
tensors) with shape and layout specialisation through defines.

Entry points take the canonical, already-validated arguments of the matching
``deep_gemm.reference`` function (the public wrappers in ``deep_gemm.gemm`` / ``deep_gemm.grouped`` /
``deep_gemm.k_grouped`` do the checks and the nn/tn/tt transposed views):

- ``bf16_gemm.bf16_gemm_nt(a, b, d, c=None, alpha=None, compiled_dims="nk")`` serves
  ``bf16_gemm_{nt,nn,tn,tt}``: cube kernel ``bf16_gemm.asc``, or the mixed kernel
  ``bf16_gemm_epilogue.asc`` when ``c`` or ``alpha`` is given.
- ``m_grouped_bf16_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, rows, zero_padding,
  compiled_dims="nk")`` serves ``m_grouped_bf16_gemm_{nt,nn}_contiguous`` with the psum and the
  ``m_indices`` layouts (``DG_INDEXED``: an M tile lies in one block of ``alignment`` rows and is
  computed with the group the kernel reads for its block's first row, skipped where that is -1), and
  ``m_grouped_bf16_gemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, compiled_dims="nk")``
  serves ``m_grouped_bf16_gemm_nt_masked`` (``m_grouped_bf16_gemm.asc``, ``DG_MASKED``; ``masked_m``
  read in the kernel only).
- ``k_grouped_bf16_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, c, groups, compiled_dims="mn")``
  serves ``k_grouped_bf16_gemm_tn_contiguous`` (``bf16_gemm_epilogue.asc`` with ``DG_K_GROUPED``).

MX block-scaled FP8/FP4 (``mx_gemm.h``: ``asc_mmad_mx``, UE8M0 scales per 32 K in the Ascend layout,
int16 pairs MN-major; FP8 x FP8, FP4 x FP4, FP8 x FP4 and FP4 x FP8 with the FP4 side widened to
E4M3 inside the GEMM (``fp8_fp4_mx_gemm.asc`` without c / alpha, ``m_grouped_fp8_fp4_mx_gemm.asc`` for
FP8 x FP4 groups; K-major FP4) or by ``fp4_to_fp8.widen(data)`` first; gran_k 32 or 128; FP32 scales
need a zero mantissa, checked on the twin's CPU tensors only -- where the rows to check come from a layout,
only with ``DG_ASCEND_CHECKS=1``):

- ``fp8_mx_gemm.fp8_gemm_nt(a, b, d, c=None, alpha=None, compiled_dims="nk")`` serves
  ``fp8_fp4_gemm_{nt,nn,tn,tt}`` (``fp8_mx_gemm.asc``; with ``c`` / ``alpha``
  ``bf16_gemm_epilogue.asc`` with ``DG_MX``).
- ``m_grouped_fp8_mx_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, rows, zero_padding, ...)`` and
  ``..._nt_masked(a, b, d, masked_m, ...)`` serve ``m_grouped_fp8_fp4_gemm_{nt,nn}_contiguous`` (psum
  and ``m_indices``) and ``m_grouped_fp8_fp4_gemm_nt_masked`` (``m_grouped_bf16_gemm.asc`` with
  ``DG_MX``; FP8 x K-major FP4 ``m_grouped_fp8_fp4_mx_gemm.asc``, the FP4 widened into L1).
- ``k_grouped_fp8_mx_gemm.k_grouped_fp8_gemm_tn_contiguous(a, sfa, b, sfb, d, c, groups, gran_k, ...)``
  serves ``k_grouped_fp8_gemm_{tn,nt}_contiguous`` (``bf16_gemm_epilogue.asc``, ``DG_MX`` +
  ``DG_K_GROUPED``) with groups starting at any K row (group-local scale pairs, a partial first K tile).

No entry point reads a layout (psum or ``m_indices``), ``masked_m``, range or page-table value on the
host: the K-grouped groups come from ``ks_cpu`` or, with the psum layout alone, as device tensors
(``KGroups``), and the kernels' group tables and scale indices are built with tensor ops.

Served by the reference instead (the table's ``accepts`` sends them there before any entry point above
is called): K granularities other than 32 / 128, and the MQA logits forms ``mqa_logits.unsupported`` / ``paged_mqa_logits.unsupported`` name.
The FP4 widening of a mixed pair runs on the GEMM's own vector cores (``fp4_l1_widen.h``, as
DeepGEMM-Ascend fuses it) for the dense form without c / alpha (``fp8_fp4_mx_gemm.asc``) and the M-grouped
FP8 x FP4 forms (``m_grouped_fp8_fp4_mx_gemm.asc``); the epilogue forms, FP4 x FP8 M-grouped and MN-major FP4
widen first with ``fp4_to_fp8.asc`` (one extra vector launch).

- ``mqa_logits.mqa_logits(q, kv, weights, ks, ke, logits, compressed, clean_logits)`` serves
  ``fp8_mqa_logits`` / ``fp8_fp4_mqa_logits`` (unscaled E4M3 q, per-token-scaled KV) and
  ``paged_mqa_logits.paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, logits,
  clean_logits)`` the paged forms: mixed kernels ``mqa_logits.asc`` / ``paged_mqa_logits.asc`` (shared
  pieces in ``mqa_logits.h``), Q.K on the cube, ReLU x weights and the head sum on SIMT lanes.
- ``bf16_einsum.bf16_einsum(expr, a, b, d, c)`` serves ``einsum`` (every expression of
  ``einsum.BF16_EXPRS``): cube kernel ``bf16_einsum.asc``, a batched GEMM over strided views, ``c = d``
  accumulated by the FixPipe store (store-mode atomic add).
- ``fp8_einsum.fp8_bmm(a, b, d, c)`` serves ``fp8_einsum`` (``fp8_bmm`` in the table):
  ``m_grouped_bf16_gemm.asc`` with ``DG_MX`` + ``DG_MASKED`` (every batch full) over the einsum's
  strided views; ``c`` (``d`` itself, or a separate tensor copied into an FP32 ``d`` first; with a BF16
  ``d`` an FP32 copy of ``c``, rounded into ``d`` after) by ``DG_ACCUMULATE`` (FixPipe atomic add).
- ``hc_prenorm_gemm.hc_prenorm_gemm(a, b, d, sqr_sum, num_splits)`` serves ``tf32_hc_prenorm_gemm``: mixed
  kernel ``hc_prenorm_gemm.asc``, A widened BF16 -> FP32 on the vector cores straight into L1 (their
  squared sums on the way), HF32 products on the cube, split-K partials as upstream returns them.
- ``sf_layout.transform_sf(sf, mn, k_blocks, gran_mn, grouping, ends, alignment)``: the vector kernel
  ``sf_layout.asc`` behind ``transform_sf_into_required_layout`` and
  ``transform_k_grouped_sf_into_required_layout`` on the Ascend path.
- ``twin_checks.py``: every kernel above at one shape (``cases()``) and at the published shapes
  (``published_shapes()``), for ``make ascend-check``.

Shared pieces: ``cube_gemm.h`` (the cube pipeline for one output tile and the FixPipe stores),
``mx_gemm.h`` (its MX block-scaled form), ``_launch.py`` (kernel handles, grid sizing, compile-time
dimensions).
"""
