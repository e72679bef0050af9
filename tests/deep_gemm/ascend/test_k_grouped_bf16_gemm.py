"""deep_gemm's Ascend K-grouped contiguous BF16 GEMM (deep_gemm/ascend/k_grouped_bf16_gemm.py, the
epilogue kernel with DG_K_GROUPED) on deepjit's Ascend twin, against
deep_gemm.reference.k_grouped_bf16_gemm_tn at upstream's BF16 tolerance: ragged and empty K groups,
c in place (as the public wrapper passes it) and separate (empty groups then copied by the kernel)."""
import pytest
import torch

from deep_gemm import reference
from deep_gemm._operands import KGroups
from deep_gemm.ascend.k_grouped_bf16_gemm import k_grouped_bf16_gemm_tn_contiguous
from deep_gemm.testing import calc_diff

# (K rows per group, M, N)
CASES = [([128, 0, 200], 100, 72), ([256, 64], 128, 256), ([0, 32, 0, 96], 40, 24), ([0, 0], 130, 40)]


def _groups(ks) -> KGroups:
    starts = [sum(ks[:i]) for i in range(len(ks))]
    return KGroups(list(ks), starts, starts)


@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize(("ks", "m", "n"), CASES)
def test_k_groups(ks, m, n, in_place):
    groups = _groups(ks)
    a = torch.randn(sum(ks), m).bfloat16()
    b = torch.randn(sum(ks), n).bfloat16()
    c = torch.randn(len(ks), m, n)
    ref = torch.empty_like(c)
    reference.k_grouped_bf16_gemm_tn(a, b, ref, c, groups)
    d = c.clone() if in_place else torch.full_like(c, -7.0)
    k_grouped_bf16_gemm_tn_contiguous(a, b, d, d if in_place else c, groups, compiled_dims="")
    diff = calc_diff(d, ref)
    assert diff < 1e-5, f"ks {ks}: calc_diff {diff}"
    torch.testing.assert_close(d, ref, rtol=1e-5, atol=1e-4)
