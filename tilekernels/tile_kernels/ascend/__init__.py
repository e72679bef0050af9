"""tile_kernels' Ascend 950 kernels (TileLang Ascend dialect, dav-3510 vector cores), compiled and launched
through deepjit; on CPU tensors they run on deepjit's Ascend CPU twin. Each entry point takes the public
op's (already validated) arguments and returns its outputs:

- ``block_cast.per_token_cast`` / ``per_block_cast`` / ``per_channel_cast`` (E4M3, E2M1; packed UE8M0 as int16;
  scale-only / precomputed-scale / clamp_min forms) and ``swiglu_forward_and_per_token_cast``
- ``swiglu_backward.swiglu_backward_and_per_token_cast`` (the backward with its E4M3 cast fused)
- ``cast_back.cast_back``
- ``routing.topk_gate`` / ``top2_sum_gate`` / ``normalize_weight``
- ``fused_mapping.get_fused_mapping``, ``expand.expand_to_fused``, ``reduce.reduce_fused``
- ``routing_helpers.group_count`` / ``aux_fi`` / ``mask_indices_by_tp`` / ``inplace_unique_group_indices`` /
  ``topk_sum_and_topk_group_idx``; ``moe_topk_gate.moe_topk_gate_forward`` (the V4.1 router)
- ``transpose.batched_transpose`` (1-, 2- and 4-byte elements)
- ``channel_cast.cast``: ``per_channel_cast_and_transpose`` and ``swiglu_forward_and_per_channel_cast_and_transpose``
  (the per-channel E4M3 cast writing its data transposed, with an optional SwiGLU prologue)
- mHC (1 to 8 residual streams): ``mhc_mix.head_mix`` / ``split_mixes`` / ``norm``, ``mhc_sinkhorn.sinkhorn``,
  ``mhc_projection.projection`` (the pre-norm GEMM on the cube cores, TF32 ``fn`` as two BF16 halves), ``mhc_streams.expand`` /
  ``apply_mix`` / ``post``, ``mhc_post_bwd.post_bwd``, ``mhc_pre_fuse.pre_big_fuse`` (projection, one fused
  norm / split / Sinkhorn kernel, apply-mix)
- ``engram``: ``engram_hash``, ``fused_weight``, ``engram_gate_fwd`` / ``engram_gate_bwd``, ``grad_w_reduce``
- ``e5m6.cast_to_e5m6`` / ``cast_back_from_e5m6``, ``lossless.per_block_cast_lossless``,
  ``channel_cast_fused.per_channel_cast_fused`` (row gather + cast), ``expand.expand_to_fused_with_sf``

Modules import TileLang lazily, so importing this package costs nothing until a kernel is built."""
