"""tile_kernels' TileLang Ascend kernels at representative shapes, for ``make ascend-codegen``
(``deepjit.tilelang_route.codegen_all``, through the package's ``deepjit.ascend_kernels`` entry point).
Every one is a vector-core (AIV) kernel unless its spec names another kind. Their ``make ascend-check``
cases (each kernel on the twin against the reference) are in twin_checks.py; its mHC and Engram families
(mhc_cases.py, check_cases_engram.py) take the settings below from here, so they check what is lowered."""
from deepjit.tilelang_route import AscendKernelSpec

from . import block_cast, cast_back, channel_cast, expand, fused_mapping, reduce, routing, swiglu_backward, transpose
from . import moe_topk_gate as gate_kernels
from . import routing_helpers as helper_kernels

TOKENS, HIDDEN = 4096, 7168
M, M3 = 4, 24  # mHC: DeepSeek-V4's 4 streams and their 4 * (2 + 4) mixes
HC, HASH_LAYERS, NGRAM, HASH_HEADS = 4, 2, 3, 8  # Engram: 4 streams, 2 hash layers of 3-grams x 8 heads
EPS, CLAMP = 1e-20, 1e-6


def _mhc() -> list:
    """Every mHC lowering the table serves at DeepSeek's 4 streams; token count and hidden size are symbolic."""
    from . import mhc_mix, mhc_post_bwd, mhc_pre_fuse, mhc_projection, mhc_sinkhorn, mhc_streams

    return [
        ("mhc_pre_big_fuse_mixes_m4_r10", lambda: mhc_pre_fuse.build_pre_mixes(M, 10)),
        ("mhc_expand", mhc_streams.build_expand),
        ("mhc_head_compute_mix_m4", lambda: mhc_mix.build_head_mix(M)),
        ("mhc_pre_split_mixes_m4", lambda: mhc_mix.build_split_mixes(M)),
        ("mhc_norm_m4", lambda: mhc_mix.build_norm(M3)),
        ("mhc_projection_m4", lambda: mhc_projection.build(M3)),
        ("mhc_projection_cube_m4", lambda: mhc_projection.build_cube(M3), "cube"),
        ("mhc_projection_sqrsum", mhc_projection.build_sqrsum),
        ("mhc_sinkhorn_m4_r10", lambda: mhc_sinkhorn.build(M, 10)),
        ("mhc_pre_apply_mix_m4", lambda: mhc_streams.build_apply_mix(M)),
        ("mhc_post_m4", lambda: mhc_streams.build_post(M)),
        ("mhc_post_bwd_m4_bf16", lambda: mhc_post_bwd.build(M, "bfloat16")),
        ("mhc_post_bwd_m4_fp32", lambda: mhc_post_bwd.build(M, "float32")),
    ]


def _engram() -> list:
    """The Engram kernels, the E5M6 casts, the fused per-channel cast's row gather and the lossless block cast.
    Symbolic shapes except the lossless cast, whose lowering keys on the rows and hidden size (here
    DeepSeek's 4096 x 7168 prefill); the gate kernels key on eps / clamp too (see engram.py), the E5M6
    cast-back on its row block; the static-shape block cast they call is listed under its own names."""
    from . import channel_cast_fused, e5m6, engram, lossless

    return [
        ("engram_fused_weight_bf16", lambda: engram.build_fused_weight("bfloat16", "bfloat16")),
        ("engram_grad_w_reduce_bf16", lambda: engram.build_grad_w_reduce("bfloat16", "bfloat16")),
        ("engram_gate_fwd_hc4", lambda: engram.build_gate_fwd(HC, EPS, CLAMP)),
        ("engram_gate_bwd_rows_hc4", lambda: engram.build_gate_bwd_rows(HC, CLAMP)),
        ("engram_gate_bwd_hc4", lambda: engram.build_gate_bwd(HC)),
        ("engram_hash_l2_n3_m8", lambda: engram.build_hash(HASH_LAYERS, NGRAM, HASH_HEADS)),
        ("cast_to_e5m6_bf16_round_sf", lambda: e5m6.build_cast("bfloat16", True)),
        ("cast_back_from_e5m6_bf16_ue8m0", lambda: e5m6.build_cast_back("bfloat16", True, 1)),
        ("gather_rows", channel_cast_fused.build_gather),
        ("per_block_cast_lossless_128x128_ue8m0", lambda: lossless.build(
            TOKENS, HIDDEN, (1, 32), (128, 128), "packed4", (HIDDEN // 128, TOKENS), 4)),
    ]


def kernels() -> list[AscendKernelSpec]:
    specs = [
        ("per_token_cast_e4m3_bf16_npc128", lambda: block_cast.build(TOKENS, HIDDEN, "bfloat16", "e4m3", 1, 128,
                                                                      False, "row", 0)),
        ("per_token_cast_e4m3_bf16_npc32_ue8m0", lambda: block_cast.build(TOKENS, HIDDEN, "bfloat16", "e4m3", 1, 32,
                                                                           True, "ue8m0", 0)),
        ("per_token_cast_e2m1_bf16_npc32", lambda: block_cast.build(TOKENS, HIDDEN, "bfloat16", "e2m1", 1, 32,
                                                                     True, "row", 0)),
        ("swiglu_fwd_per_token_cast_e4m3_bf16_npc128_weighted", lambda: block_cast.build(
            TOKENS, HIDDEN // 2, "bfloat16", "e4m3", 1, 128, False, "row", 0, None, False,
            block_cast.Swiglu(True, 10.0, TOKENS * 8))),
        ("swiglu_bwd_per_token_cast_bf16_npc128_clamped", lambda: swiglu_backward.build(
            TOKENS, HIDDEN // 2, 128, "bfloat16", TOKENS, 10.0, False)),
        ("swiglu_bwd_per_token_cast_fp32_npc32_round_sf", lambda: swiglu_backward.build(
            TOKENS, HIDDEN // 2, 32, "float32", TOKENS, None, True)),
        ("per_token_cast_e4m3_fp32_precomputed_sf", lambda: block_cast.build(TOKENS, HIDDEN, "float32", "e4m3", 1, 128,
                                                                            False, "row", 0, None, True)),
        ("per_block_cast_e4m3_fp32_128x128", lambda: block_cast.build(TOKENS, HIDDEN, "float32", "e4m3", 128, 128,
                                                                       False, "col", TOKENS // 128)),
        ("per_channel_cast_e4m3_bf16_128", lambda: block_cast.build(TOKENS, HIDDEN, "bfloat16", "e4m3", 128, 1,
                                                                     False, "row", 0)),
        ("cast_back_e4m3_ue8m0_npc32_bf16", lambda: cast_back.build(TOKENS, HIDDEN, False, "bf16", 1, 32, "packed",
                                                                     (HIDDEN // 64, TOKENS * 2), 2)),
        ("cast_back_e2m1_npc32_fp32", lambda: cast_back.build(TOKENS, HIDDEN, True, "fp32", 1, 32, "row",
                                                               (TOKENS, HIDDEN // 32), 1)),
        ("topk_gate_256x8", lambda: routing.build_topk_gate(TOKENS, 256, 8)),
        ("top2_sum_gate_sigmoid_256x8_g8x4", lambda: routing.build_top2_sum_gate(TOKENS, 256, 8, 8, 4, 0, 2.5, "sigmoid",
                                                                                0, 1, 256)),
        ("top2_sum_gate_masked_fixed_mapped", lambda: routing.build_top2_sum_gate(
            TOKENS, 256, 8, 8, 4, 1, 2.5, "sigmoid", 0, 1, 32, routing.Top2Options(True, True, True, 3, 1))),
        ("expand_to_fused_bf16_k8", lambda: expand.build(TOKENS, HIDDEN * 2, 8, TOKENS * 8, TOKENS * 8)),
        ("reduce_fused_bf16_k8", lambda: reduce.build(TOKENS * 8, HIDDEN, TOKENS, 8, "bfloat16", True)),
        ("reduce_fused_e4m3_xsf_sf_k8", lambda: reduce.build(TOKENS * 8, HIDDEN, TOKENS, 8, "float8_e4m3fn", True,
                                                             True, True, True)),
        ("normalize_weight_8", lambda: routing.build_normalize_weight(TOKENS, 8)),
        ("get_fused_mapping_256x8_a128", lambda: fused_mapping.build(TOKENS, 8, 256, TOKENS * 8 + 127 * 256, 128)),
        # symbolic shapes: one lowering each serves every size
        ("batched_transpose_b8", lambda: transpose.build(1)),
        ("batched_transpose_b16", lambda: transpose.build(2)),
        ("batched_transpose_b32", lambda: transpose.build(4)),
        ("per_channel_cast_and_transpose_npt128", lambda: channel_cast.build(128, False, True)),
        ("per_channel_cast_and_transpose_npt32_round_sf", lambda: channel_cast.build(32, True, True)),
        ("swiglu_fwd_per_channel_cast_and_transpose_npt128", lambda: channel_cast.build(128, False, True, True)),
        ("swiglu_fwd_per_channel_cast_npt32_clamped", lambda: channel_cast.build(32, False, False, True, 10.0)),
    ]
    specs += [  # the routing helpers (symbolic token counts; settings in a parameter tensor)
        ("moe_group_count_aux_fi", helper_kernels.build_count),
        ("mask_indices_by_tp_int64", lambda: helper_kernels.build_mask_tp("int64")),
        ("mask_indices_by_tp_int32", lambda: helper_kernels.build_mask_tp("int32")),
        ("inplace_unique_group_indices_k8", lambda: helper_kernels.build_unique(8)),
        ("topk_sum_and_topk_group_idx_g8x32_top2_4", lambda: helper_kernels.build_topk_group(8, 32, 2, 4)),
        ("moe_topk_gate_forward_256x8_bias", lambda: gate_kernels.build(256, 8, 0, gate_kernels.Options(bias=True))),
    ]
    specs += _mhc() + _engram()
    # (name, build) is a vector kernel; a third field names another kind (the mHC projection's cube kernel)
    return [AscendKernelSpec(s[0], s[1], s[2] if len(s) > 2 else "vector") for s in specs]
