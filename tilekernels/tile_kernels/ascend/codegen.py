"""tile_kernels' TileLang Ascend kernels at representative shapes, for ``make ascend-codegen``
(``deepjit.tilelang_route.codegen_all``), and their ``make ascend-check`` cases (``cases()``, in
check_cases.py: each kernel on the twin against the reference). Every one is a vector-core (AIV) kernel."""
from deepjit.tilelang_route import AscendKernelSpec

from . import block_cast, cast_back, channel_cast, expand, fused_mapping, reduce, routing, swiglu_backward, transpose
from . import moe_topk_gate as gate_kernels
from . import routing_helpers as helper_kernels

TOKENS, HIDDEN = 4096, 7168


def cases() -> list:
    from .check_cases import cases as all_cases
    return all_cases()


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
    from .mhc_cases import kernel_specs as mhc_specs
    specs += mhc_specs()
    from .check_cases_engram import specs as engram_specs
    specs += engram_specs()
    # (name, build) is a vector kernel; a third field names another kind (the mHC projection's cube kernel)
    return [AscendKernelSpec(s[0], s[1], s[2] if len(s) > 2 else "vector") for s in specs]
