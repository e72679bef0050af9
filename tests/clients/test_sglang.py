"""SGLang's call forms: the DeepGEMM JIT warm-up executors (``m_indices=`` keyword on the contiguous
grouped GEMM, ``masked_m=``/``expected_m=`` on the masked one, sliced ``[:m]`` operands) and the plain
dense warm-up."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8
from tests.clients.conftest import dequant_blocks, dequant_rows


def _token_fp8(rows, k):
    return per_token_cast_to_fp8(torch.randn(rows, k), use_ue8m0=False)


def _block_fp8(groups, n, k):
    parts = [per_block_cast_to_fp8(torch.randn(n, k), use_ue8m0=False) for _ in range(groups)]
    return torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])


def test_grouped_contiguous_warmup_with_m_indices_keyword():
    max_m, n, k, groups = 256, 128, 256, 2
    lhs_q, lhs_s = _token_fp8(max_m, k)
    rhs_q, rhs_s = _block_fp8(groups, n, k)
    m_indices = torch.zeros(max_m, dtype=torch.int32)       # SGLang's warm-up: every row in group 0
    out = torch.empty(max_m, n, dtype=torch.bfloat16)
    for m in (128, 256):
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((lhs_q[:m], lhs_s[:m]), (rhs_q, rhs_s), out[:m],
                                                   m_indices=m_indices[:m])
        expected = dequant_rows(lhs_q[:m], lhs_s[:m], 128) @ dequant_blocks(rhs_q[0], rhs_s[0], 128).T
        assert calc_diff(out[:m], expected) < 1e-4


def test_bf16_grouped_contiguous_with_m_indices_keyword():
    m, n, k = 256, 64, 128
    a, b = torch.randn(m, k, dtype=torch.bfloat16), torch.randn(2, n, k, dtype=torch.bfloat16)
    m_indices = torch.repeat_interleave(torch.tensor([1, 0], dtype=torch.int32), 128)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices=m_indices)
    expected = torch.cat([a[:128].float() @ b[1].float().T, a[128:].float() @ b[0].float().T])
    assert calc_diff(d, expected) < 1e-5


def test_m_indices_and_grouped_layout_together_is_refused():
    a = (torch.zeros(128, 128, dtype=torch.float8_e4m3fn), torch.ones(128, 1))
    b = (torch.zeros(1, 128, 128, dtype=torch.float8_e4m3fn), torch.ones(1, 1, 1))
    layout = torch.zeros(128, dtype=torch.int32)
    with pytest.raises(TypeError, match=r"m_indices: expected None with grouped_layout given \(they name the same argument; pass one\), got a tensor"):
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous(a, b, torch.empty(128, 128, dtype=torch.bfloat16), layout,
                                                   m_indices=layout)


def test_grouped_masked_warmup_keywords():
    groups, max_m, n, k = 2, 16, 128, 128
    lhs = per_token_cast_to_fp8(torch.randn(groups * max_m, k), use_ue8m0=False)
    lhs_q, lhs_s = lhs[0].view(groups, max_m, k), lhs[1].view(groups, max_m, -1)
    rhs_q, rhs_s = _block_fp8(groups, n, k)
    masked_m = torch.tensor([5, 16], dtype=torch.int32)
    out = torch.zeros(groups, max_m, n, dtype=torch.bfloat16)
    deep_gemm.fp8_m_grouped_gemm_nt_masked((lhs_q, lhs_s), (rhs_q, rhs_s), out, masked_m=masked_m, expected_m=8)
    for g, rows in enumerate(masked_m.tolist()):
        expected = dequant_rows(lhs_q[g, :rows], lhs_s[g, :rows], 128) @ dequant_blocks(rhs_q[g], rhs_s[g], 128).T
        assert calc_diff(out[g, :rows], expected) < 1e-4


def test_dense_warmup_on_row_slices():
    max_m, n, k = 64, 128, 256
    lhs_q, lhs_s = _token_fp8(max_m, k)
    rhs_q, rhs_s = per_block_cast_to_fp8(torch.randn(n, k), use_ue8m0=False)
    out = torch.empty(max_m, n, dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt((lhs_q[:17], lhs_s[:17]), (rhs_q, rhs_s), out[:17])
    expected = dequant_rows(lhs_q[:17], lhs_s[:17], 128) @ dequant_blocks(rhs_q, rhs_s, 128).T
    assert calc_diff(out[:17], expected) < 1e-4
