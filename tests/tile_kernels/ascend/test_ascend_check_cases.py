"""``make ascend-check`` runs tile_kernels' and deep_ep's Ascend kernels (their ``twin_checks.cases()``, found
through each package's ``deepjit.ascend_checks`` entry point) on the twin against the reference, at test
shapes and at DeepSeek-V3/V4 shapes (hidden 7168, 256 experts top-8, 4096 tokens prefill, 128 decode)."""
import torch

from deepjit.tilelang_route import ascend_check
from tile_kernels.ascend import _case_kit

FAMILIES = {  # every Ascend kernel module of each library: a case prefix that exercises it
    "tile_kernels": ("per_token_cast_e4m3", "per_token_cast_e2m1", "per_token_cast_e4m3_precomputed_sf",
                     "per_block_cast", "per_channel_cast_e4m3", "cast_back_e4m3", "cast_back_e2m1",
                     "batched_transpose_fp8", "batched_transpose_fp32", "per_channel_cast_and_transpose",
                     "swiglu_fwd_per_channel_cast_and_transpose", "swiglu_fwd_per_token_cast", "swiglu_bwd_per_token_cast",
                     "topk_gate", "top2_sum_gate", "normalize_weight", "get_fused_mapping", "expand_to_fused",
                     "reduce_fused", "group_count", "aux_fi", "mask_indices_by_tp", "inplace_unique_group_indices",
                     "topk_sum_and_topk_group_idx", "moe_topk_gate_forward", "top2_sum_gate_masked_fixed_mapped",
                     "batched_transpose_bf16", "reduce_fused_e4m3_x_sf_sf", "swiglu_bwd_per_token_cast_fp32_npc32_round_sf",
                     "per_token_cast_e4m3_bf16_npc32_ue8m0", "cast_back_e4m3_ue8m0_npc32_bf16",
                     "swiglu_fwd_per_channel_cast_npt32_clamped",
                     # mHC
                     "mhc_expand", "mhc_pre_big_fuse", "mhc_head_compute_mix", "mhc_pre_split_mixes", "mhc_norm", "mhc_projection",
                     "mhc_sinkhorn", "mhc_pre_apply_mix", "mhc_post_fwd", "mhc_post_bwd_dx_dres_bfloat16",
                     "mhc_post_bwd_dpost_dcomb_float32",
                     # Engram and the remaining casts
                     "engram_fused_weight", "engram_grad_w_reduce", "engram_gate_fwd",
                     "engram_gate_bwd", "engram_hash", "cast_to_e5m6", "cast_back_from_e5m6",
                     "expand_to_fused_with_sf", "per_channel_cast_fused", "per_block_cast_lossless"),
    "deep_ep": ("ep_pack_bf16", "ep_unpack", "ep_pack_fp8", "ep_per_token_cast_fp8_ue8m0", "ep_combine_reduce",
                "ep_combine_partial", "ep_ll_combine", "ep_engram_gather"),
}


def _listed():
    notes = []
    found = [(lib, c) for lib, c in ascend_check.library_cases(log=notes.append) if lib in FAMILIES]
    return found, notes


def test_ascend_check_lists_every_kernel_at_test_and_deepseek_shapes():
    found, notes = _listed()
    assert not any("has no reference registered" in n for n in notes), notes
    for library, prefixes in FAMILIES.items():
        names = [c.name for lib, c in found if lib == library]
        assert len(set(names)) == len(names)
        for prefix in prefixes:
            at = [n for n in names if n.startswith(prefix)]
            assert any("prefill_" in n for n in at) and any("decode_" in n for n in at), (library, prefix)
            assert any("prefill" not in n and "decode" not in n for n in at), (library, prefix)  # a test shape
    assert any("7168" in c.name for _, c in found)


def test_small_cases_pass_on_the_twin(capsys):
    found, _ = _listed()
    chosen = [(lib, c) for lib, c in found
              if c.name in ("batched_transpose_fp8_256x192", "ep_pack_bf16_9x3_h48")]
    results = ascend_check.run(chosen)
    assert [r["ok"] for r in results] == [True, True]
    out = capsys.readouterr().out
    assert "PASS tile_kernels.batched_transpose_fp8_256x192" in out and "PASS deep_ep.ep_pack_bf16_9x3_h48" in out


def test_a_case_reports_a_difference():
    want = torch.arange(12, dtype=torch.float32).view(3, 4).to(torch.float8_e4m3fn)
    wrong = want.clone()
    wrong.view(torch.uint8)[1, 2] ^= 1
    assert _case_kit.differences("q", want.clone(), want) == []
    assert _case_kit.differences("q", wrong, want) == ["q: 1 of 12 elements differ from the reference"]
    nan = torch.tensor([float("nan"), 1.0])
    assert _case_kit.differences("sf", torch.tensor([-float("nan"), 1.0]), nan) == []  # a NaN's sign: no contract
    assert _case_kit.differences("w", nan + 1e-6, nan, atol=1e-4) == []
    ones = torch.ones(3)
    assert _case_kit.differences("w", ones + torch.tensor([0.0, 1e-6, 1e-2]), ones, atol=1e-4) == [
        "w: 1 of 3 elements outside atol = rtol = 0.0001 of the reference"]  # the unequal one within it not counted
    assert _case_kit.differences("pair", (want, 3), (want, 4)) == ["pair[1]: 3 != 4"]
