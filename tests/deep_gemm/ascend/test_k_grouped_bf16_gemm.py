"""deep_gemm's Ascend K-grouped contiguous BF16 GEMM kernel (deep_gemm/ascend/k_grouped_bf16_gemm.py, the
epilogue kernel with DG_K_GROUPED) with ``c`` separate from ``d``: a form the public op never passes (it
copies ``c`` into ``d`` and accumulates in place, which tests/deep_gemm/test_k_grouped.py covers on every
backend), so it is called here directly. Empty groups are then copied from ``c`` by the kernel; against
deep_gemm.reference.k_grouped_bf16_gemm_tn at upstream's BF16 tolerance, on deepjit's Ascend twin."""
import pytest
import torch

from deep_gemm import reference
from deep_gemm._operands import KGroups
from deep_gemm.ascend.k_grouped_bf16_gemm import k_grouped_bf16_gemm_tn_contiguous
from deep_gemm.testing import calc_diff


@pytest.mark.parametrize(("ks", "m", "n"), [([128, 0, 200], 100, 72), ([0, 0], 130, 40)])  # (K rows per group, M, N)
def test_separate_c(ks, m, n):
    starts = [sum(ks[:i]) for i in range(len(ks))]
    groups = KGroups(list(ks), starts, starts)
    a = torch.randn(sum(ks), m).bfloat16()
    b = torch.randn(sum(ks), n).bfloat16()
    c = torch.randn(len(ks), m, n)
    ref = torch.empty_like(c)
    reference.k_grouped_bf16_gemm_tn(a, b, ref, c, groups)
    d = torch.full_like(c, -7.0)
    k_grouped_bf16_gemm_tn_contiguous(a, b, d, c, groups, compiled_dims="")
    assert calc_diff(d, ref) < 1e-5
    torch.testing.assert_close(d, ref, rtol=1e-5, atol=1e-4)
