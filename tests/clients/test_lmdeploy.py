"""LMDeploy's call forms: the DeepSeek-V4 fused MoE (TileKernels ``get_fused_mapping`` with a
``num_expanded_tokens`` of ``align(tokens * top_k, alignment)`` and ``force_no_sync=True``, then
``m_grouped_fp8_fp4_gemm_nt_contiguous`` given the per-expert ``expert_end`` offsets) and the EP MoE
kernels' positional ``m_indices`` on the FP8 and BF16 contiguous grouped GEMMs.

Upstream DeepGEMM asserts that a layout passed without ``use_psum_layout`` has one entry per row, and
TileKernels writes past its buffers when ``num_expanded_tokens`` is too small; the suite refuses both
with an error that names the argument, and computes LMDeploy's MoE once ``use_psum_layout=True`` says
what ``expert_end`` is."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import per_token_cast_to_fp8
from tests.clients.conftest import dequant_rows


def _routing(tokens, experts, top_k, crowded):
    if crowded:     # every token on the same top_k experts: the aligned buffer fits
        return torch.arange(top_k).repeat(tokens, 1)
    return torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)])


def _fused_moe_gemm_inputs(tokens, experts, top_k, hidden, ffn, crowded=True):
    from tile_kernels.moe import expand_to_fused_with_sf, get_fused_mapping
    alignment = deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout()
    deep_gemm.set_mk_alignment_for_contiguous_layout(alignment)
    num_expanded_tokens = ((tokens * top_k + alignment - 1) // alignment) * alignment
    topk_ids = _routing(tokens, experts, top_k, crowded)
    (pos_to_expert, _, pos_to_token_topk, token_topk_to_pos, _, expert_end, _, _) = get_fused_mapping(
        topk_ids.contiguous(), experts, num_expanded_tokens, alignment, force_no_sync=True)
    hidden_fp8 = per_token_cast_to_fp8(torch.randn(tokens, hidden, dtype=torch.bfloat16), use_ue8m0=True,
                                       gran_k=32, use_packed_ue8m0=False)
    fused = expand_to_fused_with_sf(hidden_fp8, 32, token_topk_to_pos, pos_to_expert,
                                    use_tma_aligned_col_major_sf=False)
    w = per_token_cast_to_fp8(torch.randn(experts * ffn, hidden), use_ue8m0=True, gran_k=32)
    weight = (w[0].view(experts, ffn, hidden), w[1].view(experts, ffn, -1))
    out = torch.zeros(num_expanded_tokens, ffn, dtype=torch.bfloat16)
    return fused, weight, out, expert_end, pos_to_expert
# (the SM100 form of LMDeploy's call: UE8M0-valued scales, gran_k 32, disable_ue8m0_cast=False)


def test_v4_fused_moe_expert_end_layout():
    alignment = deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout()
    fused, weight, out, expert_end, pos_to_expert = _fused_moe_gemm_inputs(alignment, 8, 2, 128, 64)
    # LMDeploy's call as written: a [G] layout of end rows with the NVIDIA default use_psum_layout=False
    with pytest.raises(ValueError, match="grouped_layout.*use_psum_layout=True"):
        deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous(fused, weight, out, expert_end, recipe=(1, 1, 32),
                                                       disable_ue8m0_cast=False, use_psum_layout=False)
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous(fused, weight, out, expert_end, recipe=(1, 1, 32),
                                                   disable_ue8m0_cast=False, use_psum_layout=True)
    a = dequant_rows(fused[0], fused[1], 32)
    b = dequant_rows(weight[0], weight[1], 32)
    rows = pos_to_expert >= 0
    expected = torch.einsum("rk,rnk->rn", a[rows], b[pos_to_expert[rows].long()])
    assert rows.sum() == 2 * alignment and calc_diff(out[rows], expected) < 1e-4


def test_v4_fused_moe_num_expanded_tokens_too_small_is_refused():
    with pytest.raises(ValueError, match="num_expanded_tokens"):
        _fused_moe_gemm_inputs(3, 8, 2, 128, 64, crowded=False)   # 6 routed experts, each an aligned block


@pytest.mark.parametrize("dtype", ["fp8", "bf16"])
def test_ep_moe_positional_m_indices(dtype):
    m, n, k, groups = 256, 64, 128, 2
    m_indices = torch.repeat_interleave(torch.tensor([1, -1], dtype=torch.int32), 128)   # tail: padding
    out = torch.full((m, n), 7.0, dtype=torch.bfloat16)
    if dtype == "bf16":
        x, w = torch.randn(m, k, dtype=torch.bfloat16), torch.randn(groups, n, k, dtype=torch.bfloat16)
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(x, w, out, m_indices)
        expected = x[:128].float() @ w[1].float().T
    else:
        x = per_token_cast_to_fp8(torch.randn(m, k), use_ue8m0=False)
        w = per_token_cast_to_fp8(torch.randn(groups * n, k), use_ue8m0=False)
        w = (w[0].view(groups, n, k), w[1].view(groups, n, -1))
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous(x, w, out, m_indices, recipe=(1, 1, 128))
        expected = dequant_rows(x[0][:128], x[1][:128], 128) @ dequant_rows(w[0][1], w[1][1], 128).T
    assert calc_diff(out[:128], expected) < 1e-4
    assert (out[128:] == 0).all()          # ensure_zero_padding (the default) zeroes the -1 rows
