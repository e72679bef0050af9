"""deep_gemm's Ascend K-grouped MX FP8 GEMM (deep_gemm/ascend/k_grouped_fp8_mx_gemm.py, the epilogue kernel
with DG_MX and DG_K_GROUPED) on deepjit's Ascend twin, against deep_gemm.reference.k_grouped_fp8_gemm_tn
at upstream's FP8 tolerance (calc_diff < 1e-3): gran_k 32 and 128, ragged K tails (psum-style groups
starting at aligned rows), groups starting off the 64-row grid (a partial first K tile; group-local
scale pairs), empty K groups, c in place and separate."""
import pytest
import torch

from deep_gemm import reference
from deep_gemm._operands import KGroups
from deep_gemm.ascend.k_grouped_fp8_mx_gemm import k_grouped_fp8_gemm_tn_contiguous
from deep_gemm.testing import calc_diff

# (K rows per group, group starts, sum_K, M, N, gran_k)
CASES = [([128, 0, 200], [0, 128, 128], 328, 100, 72, 32),
         ([100, 0, 30], [0, 128, 128], 158, 40, 264, 32),
         ([256, 64], [0, 256], 320, 130, 24, 128),
         ([40, 90, 0, 57], [0, 40, 130, 130], 187, 40, 24, 32),   # starts 40 and 130: off the 64-row grid
         ([70, 150], [0, 70], 220, 36, 40, 128)]


def _groups(ks, starts, gran_k) -> KGroups:
    sf_starts, acc = [], 0
    for k in ks:
        sf_starts.append(acc)
        acc += -(-k // gran_k)
    return KGroups(list(ks), list(starts), sf_starts)


@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize(("ks", "starts", "sum_k", "m", "n", "gran_k"), CASES)
def test_k_groups(ks, starts, sum_k, m, n, gran_k, in_place):
    groups = _groups(ks, starts, gran_k)
    rows = groups.sf_starts[-1] + -(-ks[-1] // gran_k)
    a = (torch.randn(sum_k, m) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(sum_k, n) * 4).to(torch.float8_e4m3fn)
    sfa = torch.exp2(torch.randint(-5, 6, (rows, m)).float())
    sfb = torch.exp2(torch.randint(-5, 6, (rows, n)).float())
    c = torch.randn(len(ks), m, n) * 100
    ref = torch.empty_like(c)
    reference.k_grouped_fp8_gemm_tn(a, sfa, b, sfb, ref, c, groups, gran_k)
    d = c.clone() if in_place else torch.full_like(c, -7.0)
    k_grouped_fp8_gemm_tn_contiguous(a, sfa, b, sfb, d, d if in_place else c, groups, gran_k, compiled_dims="")
    diff = calc_diff(d, ref)
    assert diff < 1e-3, f"ks {ks}: calc_diff {diff}"
    torch.testing.assert_close(d, ref, rtol=1e-4, atol=1e-3 * float(ref.abs().max()))
