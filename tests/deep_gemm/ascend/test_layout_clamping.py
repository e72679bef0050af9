"""Ascend grouped GEMMs on the twin with layouts outside the contract (the host never reads them outside
DG_ASCEND_CHECKS=1): the kernels clamp what they read, so a bad value neither reads outside A / B (the twin
aborts a launch that does) nor writes over another group's rows of D.

- K-grouped (BF16, FP8): a negative psum end would start the next group at a negative K row; starts are
  clamped into [0, K] and row counts into [0, K - start], by the table's builder and by the kernel itself.
- M-grouped psum: a group ending below its start owns no rows (its end is clamped up to its start), so
  its zero-padding tiles never cover an earlier group's rows."""
import pytest
import torch

import deep_gemm
from deep_gemm._operands import KGroups
from deep_gemm.ascend.k_grouped_bf16_gemm import k_grouped_bf16_gemm_tn_contiguous
from deep_gemm.testing import calc_diff

ALIGNMENT = 256


@pytest.fixture
def ascend(monkeypatch):
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    monkeypatch.setenv("DG_BACKEND", "ascend")


def _k_operands(dtype: str, sum_k: int, m: int, n: int, sf_rows: int):
    a, b = torch.randn(sum_k, m), torch.randn(sum_k, n)
    if dtype == "bf16":
        return a.bfloat16(), b.bfloat16(), deep_gemm.k_grouped_bf16_gemm_tn_contiguous, {}
    a = (a.to(torch.float8_e4m3fn), torch.ones(sf_rows, m))
    b = (b.to(torch.float8_e4m3fn), torch.ones(sf_rows, n))
    return a, b, deep_gemm.k_grouped_fp8_gemm_tn_contiguous, {"recipe": (1, 1, 32)}


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_k_grouped_negative_psum_end_starts_the_next_group_at_row_0(ascend, dtype):
    m, n, sum_k = 16, 24, 512
    layout = torch.tensor([-300, 400], dtype=torch.int32)  # group 1 would start at align(-300) = -256
    a, b, fn, extra = _k_operands(dtype, sum_k, m, n, sf_rows=-(-400 // 32))
    c = torch.randn(2, m, n)
    d = torch.empty_like(c)
    fn(a, b, d, None, layout, c=c, use_psum_layout=True, **extra)
    a_rows = (a if dtype == "bf16" else a[0]).float()[:400]
    b_rows = (b if dtype == "bf16" else b[0]).float()[:400]
    assert torch.equal(d[0], c[0])  # the empty group
    assert calc_diff(d[1], c[1] + a_rows.t() @ b_rows) < 1e-5


def test_k_grouped_kernel_clamps_its_own_table():
    """The kernel's (start, rows) table as a caller could hand it: a negative start and rows past K."""
    m, n, sum_k = 16, 24, 256
    a, b = torch.randn(sum_k, m).bfloat16(), torch.randn(sum_k, n).bfloat16()
    c = torch.randn(3, m, n)
    d = c.clone()
    groups = KGroups([128, 1000, -5], [-64, 128, 300], [0, 0, 0])
    k_grouped_bf16_gemm_tn_contiguous(a, b, d, d, groups, compiled_dims="")
    af, bf = a.float(), b.float()
    want = torch.stack([c[0] + af[:128].t() @ bf[:128], c[1] + af[128:].t() @ bf[128:], c[2]])
    assert calc_diff(d, want) < 1e-5
    assert torch.equal(d[2], c[2])


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_m_grouped_psum_end_below_start_writes_no_earlier_rows(ascend, dtype):
    m, n, k = 2 * ALIGNMENT, 40, 128
    layout = torch.tensor([200, 100], dtype=torch.int32)  # group 1 starts at 256 and "ends" at 100
    a, b = torch.randn(m, k), torch.randn(2, n, k)
    if dtype == "bf16":
        a, b, fn, extra = a.bfloat16(), b.bfloat16(), deep_gemm.m_grouped_bf16_gemm_nt_contiguous, {}
        a_f, b_f = a.float(), b.float()
    else:
        a = (a.to(torch.float8_e4m3fn), torch.ones(m, k // 32))
        b = (b.to(torch.float8_e4m3fn), torch.ones(2, n, k // 32))
        fn, extra = deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous, {"recipe": (1, 1, 32)}
        a_f, b_f = a[0].float(), b[0].float()
    d = torch.full((m, n), -7.0, dtype=torch.bfloat16)
    fn(a, b, d, layout, use_psum_layout=True, ensure_zero_padding=True, **extra)
    assert calc_diff(d[:200], a_f[:200] @ b_f[0].t()) < 1e-5
    assert not (d[:200] == 0).all(1).any(), "group 0's rows were zeroed by group 1's padding"
    assert torch.equal(d[200:], torch.zeros_like(d[200:]))  # group 0's padding, then group 1's (from 256)
