"""K-grouped GEMMs (weight gradients) on every backend, the Ascend twin included: aligned ks_cpu and psum
layouts (passed explicitly: the Ascend path defaults to psum), empty groups, c separate or in place, packed
scales."""
import warnings

import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.testing.generators import generate_k_grouped_contiguous

# DeepSeek-V3 wgrad shapes (M, N) scaled down; expected K per group around 96
CASES = [(4, 64, 128), (3, 96, 64)]


def _real_ks(num_groups, expected=96, empty=False, tail=None):
    import random
    ks = [max(1, int(expected * random.uniform(0.7, 1.3))) for _ in range(num_groups)]
    if empty:
        ks[1] = 0
    if tail is not None:
        ks[0] = tail
    return ks


@pytest.mark.parametrize("kind,gran_k", [("fp8", 32), ("fp8", 128), ("bf16", None)])
@pytest.mark.parametrize("use_psum_layout", [False, True])
def test_k_grouped(backend, kind, gran_k, use_psum_layout):
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    for num_groups, m, n in CASES:
        for variant in ({}, {"empty": True}, {"tail": 32}):
            case = generate_k_grouped_contiguous(num_groups, m, n, _real_ks(num_groups, **variant), kind, gran_k,
                                                 use_psum_layout)
            ks_options = [case.ks_cpu] + ([None, []] if use_psum_layout else [])
            for ks_cpu in ks_options:
                d = case.c.clone()
                if kind == "bf16":
                    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(case.a, case.b, d, ks_cpu, case.grouped_layout, c=d,
                                                                use_psum_layout=use_psum_layout)
                    assert calc_diff(d, case.ref_d) < 1e-5
                else:
                    deep_gemm.k_grouped_fp8_gemm_tn_contiguous(case.a, case.b, d, ks_cpu, case.grouped_layout, c=d,
                                                               recipe=(1, 1, gran_k), use_psum_layout=use_psum_layout)
                    assert calc_diff(d, case.ref_d) < 1e-3


def test_k_grouped_separate_c_and_packed_scales(backend):
    """The ks_cpu layout (grouped_layout = ks_cpu), passed explicitly: the Ascend path's default is psum."""
    deep_gemm.set_mk_alignment_for_contiguous_layout(128)
    case = generate_k_grouped_contiguous(3, 64, 64, [100, 256, 130], "fp8", 32)
    d0 = torch.empty_like(case.c)
    deep_gemm.k_grouped_fp8_gemm_tn_contiguous(case.a, case.b, d0, case.ks_cpu, case.grouped_layout, c=case.c,
                                               recipe=(1, 1, 32), use_psum_layout=False)
    assert calc_diff(d0, case.ref_d) < 1e-3

    def pack(sf, ks):   # per group, 4 K-blocks of that group per int32 word
        rows, out = 0, []
        for k in ks:
            blocks = (k + 31) // 32
            part = torch.nn.functional.pad(sf[rows:rows + blocks].t(), (0, (-blocks) % 4), value=1.0)
            out.append(deep_gemm.pack_ue8m0_to_int(part).t())
            rows += blocks
        return torch.cat(out)

    a = (case.a[0], pack(case.a[1], case.ks_cpu))
    b = (case.b[0], pack(case.b[1], case.ks_cpu))
    d1 = torch.empty_like(case.c)
    deep_gemm.k_grouped_fp8_gemm_tn_contiguous(a, b, d1, case.ks_cpu, case.grouped_layout, c=case.c, recipe=(1, 1, 32),
                                               use_psum_layout=False)
    assert torch.equal(d0, d1)


def test_k_grouped_nt_forwards_without_warning(backend):
    deep_gemm.set_mk_alignment_for_contiguous_layout(128)
    case = generate_k_grouped_contiguous(2, 32, 48, [128, 256], "fp8", 128)
    d_tn = case.c.clone()
    psum = dict(use_psum_layout=False)    # the ks_cpu layout on every path (Ascend's default is psum)
    deep_gemm.k_grouped_fp8_gemm_tn_contiguous(case.a, case.b, d_tn, case.ks_cpu, case.grouped_layout, c=d_tn, **psum)

    def flatten(data, ks):   # NVIDIA's SM90 form: each group's block stored K-major and flattened
        parts, offset = [], 0
        for k in ks:
            parts.append(data[offset:offset + k].t().flatten())
            offset += k
        return torch.cat(parts)

    a = (flatten(case.a[0], case.ks_cpu), case.a[1].t())
    b = (flatten(case.b[0], case.ks_cpu), case.b[1].t())
    d_nt = case.c.clone()
    with warnings.catch_warnings():   # upstream's API keeps the nt form without a DeprecationWarning
        warnings.simplefilter("error")
        deep_gemm.k_grouped_fp8_gemm_nt_contiguous(a, b, d_nt, case.ks_cpu, case.grouped_layout, c=d_nt, **psum)
    assert torch.equal(d_nt, d_tn)
    d_ascend = case.c.clone()     # DeepGEMM-Ascend's form: [M, sum_K] operands
    deep_gemm.k_grouped_fp8_gemm_nt_contiguous((case.a[0].t(), case.a[1].t()), (case.b[0].t(), case.b[1].t()),
                                               d_ascend, case.ks_cpu, case.grouped_layout, c=d_ascend, **psum)
    assert torch.equal(d_ascend, d_tn)


def test_k_grouped_all_empty_keeps_c(backend):
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    c = torch.randn(2, 8, 16)
    d = torch.empty_like(c)
    layout = torch.zeros(2, dtype=torch.int32)
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(torch.empty(0, 8, dtype=torch.bfloat16),
                                                torch.empty(0, 16, dtype=torch.bfloat16), d, [0, 0], layout, c=c)
    assert torch.equal(d, c)


def test_k_grouped_bf16_separate_c_and_empty_groups(backend):
    """The public op with c separate from d (it copies c into d and accumulates in place; the kernel's own
    separate-c form is tested in ascend/test_k_grouped_bf16_gemm.py): empty groups first, between and last
    (d takes c there), c untouched."""
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    ks = [0, 64, 0, 96, 0]
    a, b = torch.randn(sum(ks), 40).bfloat16(), torch.randn(sum(ks), 24).bfloat16()
    c = torch.randn(len(ks), 40, 24)
    c_before, want, row = c.clone(), c.clone(), 0
    for g, k in enumerate(ks):
        want[g] += a[row:row + k].float().t() @ b[row:row + k].float()
        row += k
    d = torch.full_like(c, float("nan"))
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, dtype=torch.int32), c=c,
                                                use_psum_layout=False)
    assert calc_diff(d, want) < 1e-5
    torch.testing.assert_close(d, want, rtol=1e-5, atol=1e-4)
    assert torch.equal(c, c_before)
    assert backend != "ascend" or backend.served == ["k_grouped_bf16_gemm_tn"]
