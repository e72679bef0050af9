"""deep_gemm's hand-written Ascend M-grouped contiguous BF16 GEMM (psum layout,
deep_gemm/ascend/m_grouped_bf16_gemm.*) on deepjit's Ascend twin, against
deep_gemm.reference.m_grouped_bf16_gemm_nt at upstream's BF16 tolerance.

Layouts are built as ``deep_gemm.grouped`` validates them (exclusive end rows, groups starting at
``align(end[g-1], alignment)``): the NVIDIA alignment 128 with a zero-sized group and ragged
groups, Ascend's 256 with groups shorter and longer than a tile, and nn (B MN-major); the masked form
(same kernel, DG_MASKED) with empty, partial and full groups."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deep_gemm import reference
from deep_gemm.ascend.m_grouped_bf16_gemm import m_grouped_bf16_gemm_nt_contiguous, m_grouped_bf16_gemm_nt_masked
from deep_gemm.testing import calc_diff
from tests.deep_gemm.ascend._grouped import SENTINEL, psum_rows

# (rows per group, alignment, M, N, K); 1100 rows: 9 M blocks of 128, across a panel of 8 (tile_at)
CASES = [([100, 0, 72, 130], 128, 640, 72, 200), ([300, 40], 256, 768, 256, 128), ([17], 256, 256, 40, 48),
         ([1100, 30], 256, 1536, 300, 32)]


def _run(counts, alignment, m, n, k, zero_padding=True, b_mn_major=False, dtype=torch.bfloat16):
    rows = psum_rows(counts, alignment, m)
    a = torch.randn(m, k).bfloat16()
    g = len(counts)
    b = torch.randn(g, k, n).bfloat16().transpose(1, 2) if b_mn_major else torch.randn(g, n, k).bfloat16()
    d = torch.full((m, n), SENTINEL, dtype=dtype)
    ref = d.clone()
    reference.m_grouped_bf16_gemm_nt(a, b, ref, rows, zero_padding)
    m_grouped_bf16_gemm_nt_contiguous(a, b, d, rows, zero_padding, compiled_dims="")
    valid = rows.row_group >= 0
    diff = calc_diff(d[valid], ref[valid])
    assert diff < 1e-5, f"groups {counts} align {alignment}: calc_diff {diff}"
    torch.testing.assert_close(d[valid].float(), ref[valid].float(), rtol=8e-3, atol=1e-2)
    # rows outside every group: zero with zero_padding, else untouched
    assert torch.equal(d[~valid], ref[~valid])
    return d


@pytest.mark.parametrize(("counts", "alignment", "m", "n", "k"), CASES)
def test_psum_groups(counts, alignment, m, n, k):
    _run(counts, alignment, m, n, k)


@settings(max_examples=5, deadline=None)
@given(counts=st.lists(st.integers(0, 200), min_size=1, max_size=4), n=st.integers(1, 300),
       k=st.integers(1, 160))
def test_random_groups(counts, n, k):
    alignment = 128
    m = sum(-(-c // alignment) * alignment for c in counts) + alignment
    _run(counts, alignment, m, n, k)


def test_gap_rows_kept_without_zero_padding():
    d = _run([100, 0, 72, 130], 128, 640, 72, 200, zero_padding=False)
    assert torch.all(d[100:128] == SENTINEL) and torch.all(d[640 - 126:] == SENTINEL)


def test_nn_b_mn_major_fp32_out():
    _run([300, 40], 256, 768, 256, 128, b_mn_major=True, dtype=torch.float32)


def test_all_groups_empty_writes_only_padding():
    _run([0, 0], 256, 256, 40, 48)
    _run([0, 0], 256, 256, 40, 48, zero_padding=False)


@pytest.mark.parametrize(("masked", "m", "n", "k", "dtype"), [
    ([0, 37, 200], 200, 72, 200, torch.bfloat16), ([128, 0, 1], 128, 256, 128, torch.float32)])
def test_masked_groups(masked, m, n, k, dtype):
    g = len(masked)
    a, b = torch.randn(g, m, k).bfloat16(), torch.randn(g, n, k).bfloat16()
    masked_m = torch.tensor(masked, dtype=torch.int32)
    d = torch.full((g, m, n), SENTINEL, dtype=dtype)
    ref = d.clone()
    reference.m_grouped_bf16_gemm_nt_masked(a, b, ref, masked_m)
    m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, compiled_dims="")
    for i, rows in enumerate(masked):
        if rows:
            assert calc_diff(d[i, :rows], ref[i, :rows]) < 1e-5
            torch.testing.assert_close(d[i, :rows].float(), ref[i, :rows].float(), rtol=8e-3, atol=1e-2)
        assert torch.all(d[i, rows:] == SENTINEL)   # rows past masked_m are not written


def test_wide_tiles(monkeypatch):
    """The 256-row tile kernel on psum groups (tails, an empty group, padding rows) and masked groups."""
    from deep_gemm.ascend import m_grouped_bf16_gemm as glue
    from tests.deep_gemm.ascend._wide import force_wide_tiles
    seen = force_wide_tiles(monkeypatch, glue)
    for case in CASES[:2]:
        _run(*case)
    test_masked_groups([0, 37, 200], 200, 72, 200, torch.bfloat16)
    assert seen and all(d["DG_BLOCK_M"] == 256 for _, d in seen)
