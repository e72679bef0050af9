"""deep_gemm's Ascend M-grouped MX GEMMs (deep_gemm/ascend/m_grouped_fp8_mx_gemm.py: m_grouped_bf16_gemm.asc
with DG_MX; FP8 x FP4 m_grouped_fp8_fp4_mx_gemm.asc) on deepjit's Ascend twin, against deep_gemm.reference at
upstream's FP8/FP4 tolerance (calc_diff < 1e-3): the psum layout at alignments 128 and 256 with zero-sized
and ragged groups, nn (B MN-major), and the masked form with empty, partial and full groups (masked_m read in
the kernel)."""
import pytest
import torch

from deep_gemm import formats, reference
from deep_gemm._operands import QuantOperand
from deep_gemm.ascend import m_grouped_bf16_gemm
from deep_gemm.ascend.m_grouped_fp8_mx_gemm import (
    m_grouped_fp8_fp4_gemm_nt_contiguous,
    m_grouped_fp8_fp4_gemm_nt_masked,
)
from deep_gemm.testing import calc_diff
from tests.deep_gemm.ascend._fp4 import forbid_widening_launch
from tests.deep_gemm.ascend._grouped import SENTINEL, psum_rows
from tests.deep_gemm.ascend._wide import record_kernels

KINDS = {"fp8": (False, False), "fp4": (True, True), "fp8xfp4": (False, True), "fp4xfp8": (True, False)}


def _operand(lead: tuple, mn: int, k: int, fp4: bool, gran_k: int = 32, k_major: bool = True) -> QuantOperand:
    sf = torch.exp2(torch.randint(-5, 6, lead + (mn, -(-k // gran_k))).float())
    groups = lead[0] if lead else None
    if fp4:
        data = formats.pack_fp4_codes(torch.randint(0, 16, lead + (mn, k), dtype=torch.uint8))
        return QuantOperand(data, sf, True, True, mn, k, groups, 1, gran_k)
    data = (torch.randn(lead + (mn, k)) * 4).to(torch.float8_e4m3fn)
    if not k_major:
        data = data.transpose(-1, -2).contiguous().transpose(-1, -2)
    return QuantOperand(data, sf, False, k_major, mn, k, groups, 1, gran_k)


@pytest.mark.parametrize(("kind", "counts", "alignment", "m", "n", "k", "gran_k", "b_k_major"), [
    ("fp8", [100, 0, 72, 130], 128, 640, 72, 200, 32, True),
    ("fp4", [300, 40], 256, 768, 256, 128, 32, True),
    ("fp8xfp4", [17, 0], 256, 512, 40, 96, 32, True),
    ("fp4xfp8", [60, 3], 128, 384, 72, 160, 32, True),   # A's FP4 widened first, then the cube kernel
    ("fp8", [130, 5], 256, 768, 90, 264, 128, False),
])
def test_psum_groups(kind, counts, alignment, m, n, k, gran_k, b_k_major):
    a_fp4, b_fp4 = KINDS[kind]
    rows = psum_rows(counts, alignment, m)
    a = _operand((), m, k, a_fp4, gran_k)
    a.sf[rows.row_group < 0] = 3.0   # gap rows' scales are never read (not UE8M0 on purpose)
    b = _operand((len(counts),), n, k, b_fp4, gran_k, b_k_major)
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    ref = d.clone()
    reference.m_grouped_fp8_fp4_gemm_nt(a, b, ref, rows, True)
    m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, rows, True, compiled_dims="")
    valid = rows.row_group >= 0
    assert calc_diff(d[valid], ref[valid]) < 1e-3
    assert torch.equal(d[~valid], ref[~valid])


def test_psum_gap_rows_kept_without_zero_padding():
    rows = psum_rows([100, 0, 72], 128, 512)
    a, b = _operand((), 512, 64, False), _operand((3,), 48, 64, False)
    d = torch.full((512, 48), SENTINEL, dtype=torch.bfloat16)
    ref = d.clone()
    reference.m_grouped_fp8_fp4_gemm_nt(a, b, ref, rows, False)
    m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, rows, False, compiled_dims="")
    assert calc_diff(d, ref) < 1e-3
    assert torch.all(d[100:128] == SENTINEL) and torch.all(d[128 + 72:] == SENTINEL)


@pytest.mark.parametrize(("kind", "masked", "m", "n", "k", "dtype"), [
    ("fp8", [0, 37, 200], 200, 72, 200, torch.bfloat16),
    ("fp4", [128, 0], 128, 256, 256, torch.float32),
    ("fp8xfp4", [5, 90], 90, 40, 96, torch.bfloat16),
])
def test_masked_groups(kind, masked, m, n, k, dtype):
    a_fp4, b_fp4 = KINDS[kind]
    g = len(masked)
    a, b = _operand((g,), m, k, a_fp4), _operand((g,), n, k, b_fp4)
    masked_m = torch.tensor(masked, dtype=torch.int32)
    d = torch.full((g, m, n), SENTINEL, dtype=dtype)
    ref = d.clone()
    reference.m_grouped_fp8_fp4_gemm_nt_masked(a, b, ref, masked_m)
    m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, compiled_dims="")
    for i, rows in enumerate(masked):
        if rows:
            assert calc_diff(d[i, :rows], ref[i, :rows]) < 1e-3
        assert torch.all(d[i, rows:] == SENTINEL)   # rows past masked_m are not written


def _fused_on(monkeypatch, cores: int) -> list:
    """No widening launch, and a grid of ``cores`` blocks (each walking several tiles, its vector cores
    taking the L1 stages from tile to tile); returns ``record_kernels``' list of the kernels launched."""
    forbid_widening_launch(monkeypatch)
    monkeypatch.setattr(m_grouped_bf16_gemm, "num_cube_cores", lambda _t: cores)
    return record_kernels(monkeypatch, m_grouped_bf16_gemm)


@pytest.mark.parametrize(("zero_padding", "cores"), [(True, 1), (True, 3), (False, 2)])
def test_fp8_x_fp4_widens_inside_the_gemm(monkeypatch, zero_padding, cores):
    """FP8 x FP4: no widening launch; the block's vector cores widen each tile's B rows of its group into L1
    (3 K blocks with a tail, N tiles with a tail, an empty group, zero tiles the vector cores skip)."""
    seen = _fused_on(monkeypatch, cores)
    counts, alignment, m, n, k = [70, 0, 150, 9], 128, 640, 300, 600
    rows = psum_rows(counts, alignment, m)
    a, b = _operand((), m, k, False), _operand((len(counts),), n, k, True)
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    ref = d.clone()
    reference.m_grouped_fp8_fp4_gemm_nt(a, b, ref, rows, zero_padding)
    m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, rows, zero_padding, compiled_dims="")
    assert [name for name, _ in seen] == ["dg_m_grouped_fp8_fp4_mx_gemm"]
    valid = rows.row_group >= 0
    assert calc_diff(d[valid], ref[valid]) < 1e-3
    assert torch.equal(d[~valid], ref[~valid])


def test_fp8_x_fp4_masked_widens_inside_the_gemm(monkeypatch):
    seen = _fused_on(monkeypatch, 2)
    masked, m, n, k = [0, 130, 7], 130, 260, 320
    g = len(masked)
    a, b = _operand((g,), m, k, False), _operand((g,), n, k, True)
    masked_m = torch.tensor(masked, dtype=torch.int32)
    d = torch.full((g, m, n), SENTINEL, dtype=torch.float32)
    ref = d.clone()
    reference.m_grouped_fp8_fp4_gemm_nt_masked(a, b, ref, masked_m)
    m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, compiled_dims="")
    assert [name for name, _ in seen] == ["dg_m_grouped_fp8_fp4_mx_gemm"]
    for i, rows in enumerate(masked):
        if rows:
            assert calc_diff(d[i, :rows], ref[i, :rows]) < 1e-3
        assert torch.all(d[i, rows:] == SENTINEL)
