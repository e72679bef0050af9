"""tile_kernels' Ascend 950 kernels (TileLang Ascend dialect, dav-3510 vector cores), compiled and launched
through deepjit; on CPU tensors they run on deepjit's Ascend CPU twin. Each entry point takes the public
op's (already validated) arguments and returns its outputs:

- ``block_cast.per_token_cast`` / ``per_block_cast`` / ``per_channel_cast`` (E4M3, E2M1; packed UE8M0 as int16;
  scale-only / precomputed-scale / clamp_min forms) and ``swiglu_forward_and_per_token_cast``
- ``swiglu_backward.swiglu_backward_and_per_token_cast`` (the backward with its E4M3 cast fused)
- ``cast_back.cast_back``
- ``routing.topk_gate`` / ``top2_sum_gate`` / ``normalize_weight``
- ``fused_mapping.get_fused_mapping``, ``expand.expand_to_fused``, ``reduce.reduce_fused``
- ``transpose.batched_transpose`` (1-, 2- and 4-byte elements)
- ``channel_cast.cast``: ``per_channel_cast_and_transpose`` and ``swiglu_forward_and_per_channel_cast_and_transpose``
  (the per-channel E4M3 cast writing its data transposed, with an optional SwiGLU prologue)
- ``engram``: ``engram_hash``, ``fused_weight``, ``engram_gate_fwd`` / ``engram_gate_bwd``, ``grad_w_reduce``
- ``e5m6.cast_to_e5m6`` / ``cast_back_from_e5m6``, ``lossless.per_block_cast_lossless``,
  ``channel_cast_fused.per_channel_cast_fused`` (row gather + cast), ``expand.expand_to_fused_with_sf``

Modules import TileLang lazily, so importing this package costs nothing until a kernel is built."""
