"""The M-grouped contiguous GEMMs with the ``m_indices`` layout (``use_psum_layout=False``) on the Ascend
path: m_grouped_bf16_gemm.asc with DG_INDEXED (BF16, and MX FP8 / FP4 with DG_MX; FP8 x FP4 in
m_grouped_fp8_fp4_mx_gemm.asc) on deepjit's twin (DG_BACKEND=ascend, CPU tensors), through the public ops,
against the reference path at upstream's tolerances (calc_diff), nt and nn.

Layouts are upstream's: each expert's rows, then -1 up to the alignment, an expert with no rows, and a
trailing block of padding. Two shape classes: Ascend's alignment 256 (two M tiles per block, the second
partly or wholly padding) with N and K off the tile sizes; alignment 64 (blocks smaller than an M tile)
with two N blocks and M ending in a partial block. Rows the reference does not compute are checked
exactly: zero with ``ensure_zero_padding``, else untouched."""
import pytest
import torch

import deep_gemm
from deep_gemm import _dispatch
from deep_gemm._operands import GroupedRows
from deep_gemm.ascend import m_grouped_bf16_gemm as ascend_m_grouped
from deep_gemm.ascend import m_grouped_fp8_mx_gemm as ascend_m_grouped_fp8
from deep_gemm.grouped import _indexed_row_groups
from deep_gemm.testing import calc_diff
from deep_gemm.testing.generators import cast_grouped_operand, cast_operand, threshold

from .test_m_grouped_fp8_mx_gemm import _fused_on, _operand

SENTINEL = 5.0
# (rows per expert, alignment, M, N, K); M past the experts' aligned rows is padding
SHAPES = [([200, 0, 300], 256, 1024, 72, 200), ([50, 0, 70, 20], 64, 286, 300, 128)]
# (kind, layout, ensure_zero_padding)
FORMS = [("bf16", "nt", True), ("bf16", "nt", False), ("bf16", "nn", True), ("fp8_mx", "nt", True),
         ("fp8_mx", "nn", False), ("fp4", "nt", False), ("fp8xfp4", "nt", True), ("fp8xfp4", "nt", False)]


def _m_indices(counts, alignment: int, m: int) -> torch.Tensor:
    layout, start = torch.full((m,), -1, dtype=torch.int32), 0
    for g, rows in enumerate(counts):
        layout[start:start + rows] = g
        start += -(-rows // alignment) * alignment
    assert start <= m
    return layout


def _operands(kind: str, layout: str, m: int, n: int, k: int, g: int):
    a, b = torch.randn(m, k).bfloat16(), torch.randn(g, n, k).bfloat16()
    if kind == "bf16":
        return a, (b.transpose(1, 2).contiguous() if layout == "nn" else b), {}
    fp4 = kind == "fp4"
    qa = cast_operand(a, fp4, 32, False, True)
    qb = cast_grouped_operand(b, fp4 or kind == "fp8xfp4", 32, False, True, mn_major=layout == "nn")
    if layout == "nn":
        qb = (qb[0].transpose(1, 2), qb[1].transpose(1, 2))
    return qa, qb, {"recipe": (1, 1, 32)}


def _op(kind: str, layout: str):
    prefix = "m_grouped_bf16_gemm" if kind == "bf16" else "m_grouped_fp8_fp4_gemm"
    return getattr(deep_gemm, f"{prefix}_{layout}_contiguous")


def _both_paths(monkeypatch, kind, layout, zero_padding, counts, alignment, m, n, k):
    # fp8xfp4: the fused kernel on a grid of 3 blocks, each walking several tiles, its vector cores with its cube
    fused = _fused_on(monkeypatch, 3) if kind == "fp8xfp4" else None
    deep_gemm.set_mk_alignment_for_contiguous_layout(alignment)
    a, b, extra = _operands(kind, layout, m, n, k, len(counts))
    m_indices = _m_indices(counts, alignment, m)
    out = []
    for backend in ("ascend", "reference"):
        monkeypatch.setenv("DG_BACKEND", backend)
        d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
        _op(kind, layout)(a, b, d, m_indices, use_psum_layout=False, ensure_zero_padding=zero_padding, **extra)
        out.append(d)
    assert fused is None or [name for name, _ in fused] == ["dg_m_grouped_fp8_fp4_mx_gemm"]
    return m_indices, *out


@pytest.mark.parametrize(("counts", "alignment", "m", "n", "k"), SHAPES)
@pytest.mark.parametrize(("kind", "layout", "zero_padding"), FORMS)
def test_m_indices_against_the_reference(monkeypatch, kind, layout, zero_padding, counts, alignment, m, n, k):
    m_indices, got, want = _both_paths(monkeypatch, kind, layout, zero_padding, counts, alignment, m, n, k)
    # a block whose first row is -1 is not computed; with zero padding no -1 row is
    block_first = m_indices[torch.arange(m) // alignment * alignment]
    computed = (m_indices >= 0) if zero_padding else (block_first >= 0)
    assert torch.all(got[~computed] == (0.0 if zero_padding else SENTINEL))
    assert torch.equal(got[~computed], want[~computed])
    diff = calc_diff(got[computed], want[computed])
    assert diff < threshold(kind), f"{kind} {layout}: calc_diff {diff}"


def test_the_table_serves_m_indices_with_the_ascend_kernel(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    m, n, k, alignment = 256, 40, 64, 128
    layout = _m_indices([100, 60], alignment, m)
    rows = GroupedRows(_indexed_row_groups(layout, m, 2, alignment, False), layout, False, alignment)
    d = torch.zeros(m, n, dtype=torch.bfloat16)
    bf16 = (torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(2, n, k, dtype=torch.bfloat16))
    assert _dispatch.TABLE.serves("m_grouped_bf16_gemm_nt", d.device, *bf16, d, rows, True) == "ascend"
    mx = (_operand((), m, k, False), _operand((2,), n, k, False))
    assert _dispatch.TABLE.serves("m_grouped_fp8_fp4_gemm_nt", d.device, *mx, d, rows, True) == "ascend"
    # and the public op launches the kernel
    launches = []
    real = ascend_m_grouped.launch
    monkeypatch.setattr(ascend_m_grouped, "launch", lambda *args, **kw: launches.append(1) or real(*args, **kw))
    deep_gemm.set_mk_alignment_for_contiguous_layout(alignment)
    a, b = torch.randn(m, k).bfloat16(), torch.randn(2, n, k).bfloat16()
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, use_psum_layout=False)
    assert launches == [1]
    assert calc_diff(d[:100], a[:100].float() @ b[0].float().t()) < 1e-5 and torch.all(d[100:128] == 0)


def test_out_of_range_group_ids_are_skipped_and_checked_in_the_debug_mode(monkeypatch):
    """Without a host read, a block whose group id is past G is not computed (B is never read past its
    groups); DG_ASCEND_CHECKS=1 reads the layout and names the argument."""
    monkeypatch.setenv("DG_BACKEND", "ascend")
    deep_gemm.set_mk_alignment_for_contiguous_layout(128)
    m, n, k = 256, 24, 64
    a, b = torch.randn(m, k).bfloat16(), torch.randn(2, n, k).bfloat16()
    layout = torch.tensor([1] * 128 + [7] * 128, dtype=torch.int32)
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, use_psum_layout=False, ensure_zero_padding=False)
    assert calc_diff(d[:128], a[:128].float() @ b[1].float().t()) < 1e-5 and torch.all(d[128:] == SENTINEL)
    monkeypatch.setenv("DG_ASCEND_CHECKS", "1")
    with pytest.raises(ValueError, match=r"grouped_layout: expected group ids in \[-1, 2\)"):
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, use_psum_layout=False)


@pytest.mark.parametrize("kind", ["bf16", "fp8"])
def test_the_entry_points_check_the_layout_before_a_launch(kind):
    m, n, k = 64, 16, 64
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    short = torch.zeros(m - 1, dtype=torch.int32)
    rows = GroupedRows(short.to(torch.int64), short, False, 64)
    with pytest.raises(ValueError, match=r"grouped_layout: expected int32 \[64\]"):
        if kind == "bf16":
            ascend_m_grouped.m_grouped_bf16_gemm_nt_contiguous(torch.zeros(m, k, dtype=torch.bfloat16),
                                                               torch.zeros(1, n, k, dtype=torch.bfloat16), d, rows, True)
        else:
            ascend_m_grouped_fp8.m_grouped_fp8_fp4_gemm_nt_contiguous(_operand((), m, k, False),
                                                                      _operand((1,), n, k, False), d, rows, True)
    with pytest.raises(ValueError, match="alignment: expected a positive int"):
        ascend_m_grouped.m_grouped_bf16_gemm_nt_contiguous(
            torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(1, n, k, dtype=torch.bfloat16), d,
            GroupedRows(torch.zeros(m, dtype=torch.int64), torch.zeros(m, dtype=torch.int32), False, 0), True)
    assert torch.all(d == SENTINEL)


@pytest.mark.parametrize(("kind", "layout", "zero_padding"), [("bf16", "nt", True), ("fp8_mx", "nt", False)])
def test_wide_tiles(monkeypatch, kind, layout, zero_padding):
    """The 256-row tile kernel over m_indices blocks of 256 rows; blocks of 64 keep 128-row tiles (a tile
    ends at its block, so a wide one would compute no more rows)."""
    from tests.deep_gemm.ascend._wide import force_wide_tiles
    seen = force_wide_tiles(monkeypatch, ascend_m_grouped)
    for shape in SHAPES:
        m_indices, got, want = _both_paths(monkeypatch, kind, layout, zero_padding, *shape)
        computed = m_indices >= 0
        assert calc_diff(got[computed], want[computed]) < threshold(kind)
    assert [d["DG_BLOCK_M"] for _, d in seen] == [256, 128]
