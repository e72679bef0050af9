"""M-grouped contiguous GEMMs (m_indices and psum layouts, passed explicitly: the Ascend path defaults to psum)
and masked GEMMs, on every backend, the Ascend twin included."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import deep_gemm
from deep_gemm import grouped
from deep_gemm.testing import calc_diff
from deep_gemm.testing.generators import generate_m_grouped_contiguous, generate_m_grouped_masked, threshold

from ._kinds import FP8_ANY_SCALES, fp8_kind

KINDS = [FP8_ANY_SCALES, "fp8_1d1d", "fp8xfp4", "fp4"]
ALIGNMENT = 32      # small shapes: DeepSeek-V3 expert GEMMs (N, K) scaled down
SHAPES = [(4, 40, 192, 256), (2, 70, 128, 384)]


def _run(case, kind, layout, **kwargs):
    b = case.b
    if layout == "nn":
        b = (b[0].transpose(1, 2), b[1].transpose(1, 2)) if kind != "bf16" else b.transpose(1, 2)
    if kind == "bf16":
        getattr(deep_gemm, f"m_grouped_bf16_gemm_{layout}_contiguous")(case.a, b, case.d, case.grouped_layout, **kwargs)
    else:
        getattr(deep_gemm, f"m_grouped_fp8_fp4_gemm_{layout}_contiguous")(case.a, b, case.d, case.grouped_layout,
                                                                          **case.kwargs, **kwargs)


def _check_valid_rows(case, kind):
    for s, e in case.valid_rows:
        if e > s:
            diff = calc_diff(case.d[s:e], case.ref_d[s:e])
            assert diff < threshold(kind), f"{kind}: rows [{s}, {e}) diff {diff}"


@pytest.mark.parametrize("kind", KINDS + ["bf16"])
@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize("use_psum_layout", [False, True])
def test_m_grouped_contiguous(backend, kind, layout, use_psum_layout):
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    # on the twin one shape class: the Ascend kernels' tiles and tails are in ascend/test_m_grouped_*.py
    for num_groups, expected_m, n, k in SHAPES[:1] if backend == "ascend" else SHAPES:
        for b_mn_major in (False, True) if layout == "nt" else (False,):
            case = generate_m_grouped_contiguous(num_groups, expected_m, n, k, kind, use_psum_layout, b_mn_major)
            case.d.fill_(5.0)
            _run(case, kind, layout, use_psum_layout=use_psum_layout)
            _check_valid_rows(case, kind)
            padding = torch.ones(case.d.size(0), dtype=torch.bool)
            for s, e in case.valid_rows:
                padding[s:e] = False
            assert bool((case.d[padding] == 0).all()), "ensure_zero_padding: padding rows must be zero"


def test_psum_gap_rows_untouched_without_zero_padding(backend):
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    kind = fp8_kind(backend)
    case = generate_m_grouped_contiguous(3, 40, 192, 256, kind, True)
    case.d.fill_(5.0)
    _run(case, kind, "nt", use_psum_layout=True, ensure_zero_padding=False)
    _check_valid_rows(case, kind)
    padding = torch.ones(case.d.size(0), dtype=torch.bool)
    for s, e in case.valid_rows:
        padding[s:e] = False
    assert bool((case.d[padding] == 5.0).all())


@pytest.mark.parametrize("kind", [FP8_ANY_SCALES, "bf16"])
def test_m_indices_without_zero_padding_computes_all_of_d(backend, kind):
    """Upstream's non-psum check: its kernels compute each alignment block with the group of its first row,
    so with zero A padding every row of D, padding included, matches ``a @ b[g].T``."""
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    case = generate_m_grouped_contiguous(3, 40, 192, 256, kind)
    case.d.fill_(5.0)
    _run(case, kind, "nt", use_psum_layout=False, ensure_zero_padding=False)   # m_indices (Ascend's default: psum)
    assert calc_diff(case.d, case.ref_d) < threshold(kind)


def _block_groups(m_indices, alignment):
    """Each row's group as upstream's tiles see it: the first row of its alignment block (-1: not computed)."""
    return torch.tensor([int(m_indices[(i // alignment) * alignment]) for i in range(m_indices.numel())])


@pytest.mark.parametrize("m", [96, 83])
def test_m_indices_padding_rows_and_partial_last_block(backend, m):
    """Non-zero A padding rows are computed with their block's group (``ensure_zero_padding=False``) or
    zeroed; M need not be a multiple of the alignment (the last block is partial); a block of -1 rows is
    left alone without zero padding."""
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    a, b = torch.randn(m, 64).bfloat16(), torch.randn(3, 48, 64).bfloat16()
    m_indices = torch.full((m,), -1, dtype=torch.int32)
    m_indices[0:20], m_indices[64:75] = 1, 0                 # block 1 (rows 32..63) is all padding
    groups = _block_groups(m_indices, ALIGNMENT)
    for zero_padding in (False, True):
        d = torch.full((m, 48), 5.0).bfloat16()
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices, ensure_zero_padding=zero_padding,
                                                    use_psum_layout=False)
        for i in range(m):
            g = int(m_indices[i]) if zero_padding else int(groups[i])
            want = (a[i].float() @ b[g].float().t()).bfloat16() if g >= 0 else torch.full((48,), 0.0 if zero_padding
                                                                                        else 5.0).bfloat16()
            assert torch.allclose(d[i].float(), want.float(), rtol=1e-2, atol=1e-2), f"row {i}"


@pytest.mark.parametrize("m", [96, 83])
def test_m_indices_blocks_mixing_groups_are_computed_as_upstream(backend, m):
    """Upstream accepts any ``m_indices``: each tile of ``alignment`` rows is computed with the group of its
    first row (``grouped_layout[m_block_idx * BLOCK_M]``, BLOCK_M = the alignment), rows labelled with
    another group included; a tile whose first row is -1 is not computed, whatever its other rows say."""
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    a, b = torch.randn(m, 64).bfloat16(), torch.randn(3, 48, 64).bfloat16()
    m_indices = torch.full((m,), -1, dtype=torch.int32)
    m_indices[0:20], m_indices[20:28] = 1, 2                 # tile 0 mixes groups 1 and 2
    m_indices[40:45] = 2                                     # tile 1 starts with -1: not computed
    m_indices[64:70], m_indices[72:80] = 0, 1                # tile 2 mixes groups 0 and 1
    groups = _block_groups(m_indices, ALIGNMENT)
    for zero_padding in (False, True):
        d = torch.full((m, 48), 5.0).bfloat16()
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices, ensure_zero_padding=zero_padding,
                                                    use_psum_layout=False)
        for i in range(m):
            g = int(groups[i]) if int(m_indices[i]) >= 0 or not zero_padding else -1
            if g >= 0:
                want = (a[i].float() @ b[g].float().t()).bfloat16()
            else:  # padding: zeroed when asked, else what the caller left there
                want = torch.full((48,), 0.0 if zero_padding else 5.0).bfloat16()
            assert torch.allclose(d[i].float(), want.float(), rtol=1e-2, atol=1e-2), f"row {i}"


def test_psum_counts_form_matches_end_rows(backend, monkeypatch):
    """DeepGEMM-Ascend's documented psum form (per-group row counts), selected explicitly."""
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    kind = fp8_kind(backend)
    ends = generate_m_grouped_contiguous(4, 40, 192, 256, kind, True, psum_form="end_rows")
    torch.manual_seed(0)
    import random
    random.seed(0)
    deep_gemm.set_psum_layout_form("counts")
    try:
        counts = generate_m_grouped_contiguous(4, 40, 192, 256, kind, True, psum_form="counts")
        assert not torch.equal(counts.grouped_layout, ends.grouped_layout)
        _run(counts, kind, "nt", use_psum_layout=True)
        _check_valid_rows(counts, kind)
    finally:
        deep_gemm.set_psum_layout_form("end_rows")
    monkeypatch.setenv("DG_PSUM_LAYOUT_FORM", "counts")
    deep_gemm.runtime._state.psum_layout_form = None
    assert deep_gemm.get_psum_layout_form() == "counts"


def test_psum_gap_scales_may_be_garbage(backend):
    """Scale rows of psum gaps are never read: NaN there must not reach D nor fail the UE8M0 check."""
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    case = generate_m_grouped_contiguous(3, 40, 192, 256, "fp8_1d1d", True)
    qa, sfa = case.a
    sfa = sfa.clone()
    padding = torch.ones(sfa.size(0), dtype=torch.bool)
    for s, e in case.valid_rows:
        padding[s:e] = False
    sfa[padding] = float("nan")
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((qa, sfa), case.b, case.d, case.grouped_layout,
                                                   use_psum_layout=True, **case.kwargs)
    _check_valid_rows(case, "fp8_1d1d")
    assert not bool(case.d.isnan().any())


@pytest.mark.parametrize("kind", KINDS + ["bf16"])
def test_m_grouped_masked(backend, kind):
    shapes = [(3, 64, 20, 192, 256), (2, 96, 64, 256, 128)]
    # on the twin one shape class (each N, K compiles the kernel): its tails are in ascend/test_m_grouped_*.py
    for num_groups, max_m, expected_m, n, k in shapes[:1] if backend == "ascend" else shapes:
        case = generate_m_grouped_masked(num_groups, max_m, expected_m, n, k, kind)
        case.d.fill_(7.0)
        if kind == "bf16":
            deep_gemm.m_grouped_bf16_gemm_nt_masked(case.a, case.b, case.d, case.masked_m, case.expected_m)
        else:
            deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked(case.a, case.b, case.d, case.masked_m, case.expected_m,
                                                       **case.kwargs)
        for g, m in enumerate(case.masked_m.tolist()):
            if m:
                assert calc_diff(case.d[g, :m], case.ref_d[g, :m]) < threshold(kind)
            assert bool((case.d[g, m:] == 7.0).all()), "rows at or beyond masked_m must be untouched"


def test_masked_legacy_aliases():
    assert deep_gemm.fp8_m_grouped_gemm_nt_masked is deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked
    assert deep_gemm.bf16_m_grouped_gemm_nt_masked is deep_gemm.m_grouped_bf16_gemm_nt_masked
    assert deep_gemm.m_grouped_fp8_gemm_nt_contiguous is deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous


def test_alignment_settings():
    assert deep_gemm.get_m_alignment_for_contiguous_layout() == 128
    deep_gemm.set_mk_alignment_for_contiguous_layout(64)
    assert deep_gemm.get_k_alignment_for_contiguous_layout() == 64
    assert deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout() == 224
    assert deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout(100) == 128
    assert deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout(1) == 32


@settings(max_examples=30, deadline=None)
@given(counts=st.lists(st.integers(0, 300), min_size=1, max_size=6), alignment=st.sampled_from([32, 128, 256]),
       spare=st.integers(0, 300), form=st.sampled_from(["counts", "end_rows"]))
def test_psum_row_groups_without_a_host_read_match(counts, alignment, spare, form):
    """The NPU path's device-side psum parsing (no host read of the layout) against the host one."""
    ends, end = [], 0
    for g, count in enumerate(counts):
        end = (0 if g == 0 else -(-end // alignment) * alignment) + count
        ends.append(end)
    layout = torch.tensor(counts if form == "counts" else ends, dtype=torch.int32)
    m = end + spare
    want = grouped._psum_row_groups(layout, m, alignment, form)
    got = grouped._psum_row_groups_on_device(layout, m, alignment, form)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
