"""TK_BACKEND=ascend on CPU tensors: the public ops reach the TileLang Ascend kernels through
tile_kernels' backend table (run on deepjit's Ascend twin), bit-exact with the reference."""
import torch

import tile_kernels
from tile_kernels import _dispatch
from tile_kernels.reference import cast as ref


def test_per_token_cast_and_cast_back_run_the_ascend_kernels(monkeypatch):
    monkeypatch.setenv("TK_BACKEND", "ascend")
    x = torch.randn(37, 256) * 3
    assert _dispatch.TABLE.serves("per_token_cast", x.device, "plain", x, "e4m3", (1, 128), None, False, False, False,
                             None, False, None) == "ascend"
    q, sf = tile_kernels.quant.per_token_cast(x, "e4m3", 128)
    q_ref, sf_ref = ref.cast(x, "e4m3", (1, 128))
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(sf, sf_ref)
    back = tile_kernels.quant.per_token_cast_back((q, sf), "fp32", 128)
    assert torch.equal(back, ref.cast_back((q_ref, sf_ref), "fp32", (1, 128)))


def test_topk_gate_runs_the_ascend_kernel(monkeypatch):
    monkeypatch.setenv("TK_BACKEND", "ascend")
    scores = torch.randn(41, 64)
    assert _dispatch.TABLE.serves("topk_gate", scores.device, scores, 6) == "ascend"
    assert torch.equal(tile_kernels.moe.topk_gate(scores, 6), torch.topk(scores, 6, sorted=True).indices)


def test_ops_with_ascend_kernels():
    served = {e.name for e in _dispatch.TABLE if e.ascend is not None}
    assert served == {"per_token_cast", "per_token_cast_with_sf_only", "per_token_cast_with_precomputed_sf",
                      "per_block_cast", "per_block_cast_with_sf_only", "per_block_cast_with_precomputed_sf",
                      "per_channel_cast", "per_channel_cast_and_transpose", "cast_back",
                      "swiglu_forward_and_per_token_cast", "swiglu_backward_and_per_token_cast", "topk_gate",
                      "top2_sum_gate", "normalize_weight", "get_fused_mapping", "expand_to_fused", "reduce_fused",
                      "batched_transpose", "swiglu_forward_and_per_channel_cast_and_transpose",
                      "group_count", "aux_fi", "mask_indices_by_tp", "inplace_unique_group_indices",
                      "topk_sum_and_topk_group_idx", "moe_topk_gate_forward",
                      # mHC
                      "expand_to_mhc", "mhc_norm", "mhc_pre_split_mixes", "sinkhorn_normalize",
                      "mhc_head_compute_mix", "mhc_pre_apply_mix", "mhc_post", "mhc_post_bwd", "mhc_projection",
                      "mhc_pre_big_fuse",
                      # Engram and the remaining casts
                      "fused_weight", "grad_w_reduce", "engram_gate_fwd", "engram_gate_bwd", "engram_hash",
                      "cast_to_e5m6", "cast_back_from_e5m6", "expand_to_fused_with_sf", "per_channel_cast_fused",
                      "per_block_cast_lossless"}
