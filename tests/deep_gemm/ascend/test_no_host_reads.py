"""The Ascend path (DG_BACKEND=ascend, CPU tensors on the twin) reads no device tensor on the host: each
public op family runs with its layout / mask / range / page-table tensors marked "device only" -- any host
read of them, or of a tensor computed from them (``.item()``, ``.tolist()``, ``bool()``, ``int()``,
``.numpy()``, ``nonzero``, ``unique``, ``torch.equal``, a boolean-mask index), raises -- and still matches
the reference path; bad values are clamped on the device and reported only with DG_ASCEND_CHECKS=1. (The
scale-factor transforms are checked the same way in test_sf_layout.py.)"""
import pytest
import torch

import deep_gemm
from deep_gemm import _lib
from deep_gemm.testing import calc_diff
from tests.testkit.host_reads import DeviceOnly, HostRead
from tests.testkit.host_reads import mark as _mark

from .test_mqa_logits import _inputs as _mqa_inputs
from .test_mqa_logits import _ranges
from .test_paged_mqa_logits import _inputs as _paged_inputs
from .test_paged_mqa_logits import _lengths

ALIGNMENT = 256  # the Ascend mk alignment, set on both paths so the psum layouts mean the same groups


def _on_both_paths(monkeypatch, call, *device_only):
    """``call()`` on the Ascend path under ``DeviceOnly`` (``device_only`` marked), then on the reference path;
    the two results (``call`` returns its outputs) are compared by the caller."""
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    monkeypatch.setenv("DG_BACKEND", "ascend")
    _mark(*device_only)
    with DeviceOnly():
        got = call()
    monkeypatch.setenv("DG_BACKEND", "reference")
    for t in device_only:
        if t is not None:
            del t._device_only
    return got, call()


def test_the_guard_catches_reads_of_derived_tensors():
    layout, = _mark(torch.tensor([3, 5], dtype=torch.int32))
    with DeviceOnly():
        ends = (layout.to(torch.int64) + 1).cumsum(0)
        torch.zeros(2).tolist()  # unmarked tensors stay readable
        for read in (ends.tolist, ends[0].item, lambda: bool(ends[0]), lambda: int(ends[1]), ends.nonzero,
                     lambda: torch.ones(2)[ends > 4]):
            with pytest.raises(HostRead):
                read()


def test_dense_bf16_gemm_with_every_tensor_marked(monkeypatch):
    a, b, c = torch.randn(40, 96).bfloat16(), torch.randn(24, 96).bfloat16(), torch.randn(40, 24)

    def call():
        d = torch.empty(40, 24)
        deep_gemm.bf16_gemm_nt(a, b, d, c=c)
        return d

    got, want = _on_both_paths(monkeypatch, call, a, b, c)
    assert calc_diff(got, want) < 1e-5


def _psum_ends(counts):
    ends, end = [], 0
    for g, rows in enumerate(counts):
        end = (0 if g == 0 else -(-end // ALIGNMENT) * ALIGNMENT) + rows
        ends.append(end)
    return torch.tensor(ends, dtype=torch.int32)


def _pack_per_group(sf, ks):
    """Per-group FP32 scale rows -> int32 words of 4 K-blocks of one group (``ceil(blocks / 4)`` rows each)."""
    rows, out = 0, []
    for k in ks:
        blocks = -(-k // 32)
        part = torch.nn.functional.pad(sf[rows:rows + blocks].t(), (0, (-blocks) % 4), value=1.0)
        out.append(deep_gemm.pack_ue8m0_to_int(part).t())
        rows += blocks
    return torch.cat(out)


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "fp8_int32_sf"])
@pytest.mark.parametrize("ks_given", [False, True])
def test_k_grouped(monkeypatch, dtype, ks_given):
    m, n, counts = 24, 40, [96, 0, 160]
    if ks_given:  # no psum: groups back to back, the layout repeats ks_cpu
        ks_cpu, layout, psum, sum_k = [256, 0, 512], torch.tensor([256, 0, 512], dtype=torch.int32), False, 768
    else:         # psum: groups start at aligned ends, ks_cpu omitted
        ks_cpu, layout, psum = None, _psum_ends(counts), True
        sum_k = int(layout[-1])
    ks = ks_cpu or counts
    c = torch.randn(len(ks), m, n)
    a, b = torch.randn(sum_k, m), torch.randn(sum_k, n)
    if dtype == "bf16":
        a, b = a.bfloat16(), b.bfloat16()
        fn, extra = deep_gemm.k_grouped_bf16_gemm_tn_contiguous, {}
    else:
        sf_rows = sum(-(-k // 32) for k in ks)
        a = (a.to(torch.float8_e4m3fn), torch.exp2(torch.randint(-3, 4, (sf_rows, m)).float()))
        b = (b.to(torch.float8_e4m3fn), torch.exp2(torch.randint(-3, 4, (sf_rows, n)).float()))
        if dtype == "fp8_int32_sf":
            a, b = (a[0], _pack_per_group(a[1], ks)), (b[0], _pack_per_group(b[1], ks))
        fn, extra = deep_gemm.k_grouped_fp8_gemm_tn_contiguous, {"recipe": (1, 1, 32)}

    def call():
        d = torch.empty_like(c)
        fn(a, b, d, ks_cpu, layout, c=c, use_psum_layout=psum, **extra)
        return d

    got, want = _on_both_paths(monkeypatch, call, layout)
    assert calc_diff(got, want) < (1e-5 if dtype == "bf16" else 1e-3)
    assert torch.equal(got[1], c[1])


def test_k_grouped_psum_values_are_checked_only_in_the_debug_mode(monkeypatch):
    """Without a host read, an end past K is clamped (the kernel stays inside a); DG_ASCEND_CHECKS=1 reads
    the layout and names the bad group."""
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    monkeypatch.setenv("DG_BACKEND", "ascend")
    a, b = torch.randn(300, 16).bfloat16(), torch.randn(300, 24).bfloat16()
    layout, c = torch.tensor([100, 900], dtype=torch.int32), torch.zeros(2, 16, 24)
    d = torch.empty_like(c)
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, None, layout, c=c)
    want = torch.stack([a[:100].float().t() @ b[:100].float(), a[256:].float().t() @ b[256:].float()])
    assert calc_diff(d, want) < 1e-5
    monkeypatch.setenv("DG_ASCEND_CHECKS", "1")
    with pytest.raises(ValueError, match=r"grouped_layout\[1\]: expected an end offset in \[256, 300\]"):
        deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, None, layout, c=c)


def _m_grouped_operands(dtype: str, m: int, n: int, k: int):
    """``(a, b, op, extra kwargs)`` of a two-group M-grouped contiguous nt GEMM: BF16, or FP8 with scales."""
    a, b = torch.randn(m, k), torch.randn(2, n, k)
    if dtype == "bf16":
        return a.bfloat16(), b.bfloat16(), deep_gemm.m_grouped_bf16_gemm_nt_contiguous, {}
    a = (a.to(torch.float8_e4m3fn), torch.ones(m, k // 32))
    b = (b.to(torch.float8_e4m3fn), torch.full((2, n, k // 32), 0.5))
    return a, b, deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous, {"recipe": (1, 1, 32)}


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_m_grouped_psum(monkeypatch, dtype):
    n, k, layout = 40, 128, _psum_ends([60, 30])
    m = ALIGNMENT + 30
    a, b, fn, extra = _m_grouped_operands(dtype, m, n, k)

    def call():
        d = torch.zeros(m, n, dtype=torch.bfloat16)
        fn(a, b, d, layout, use_psum_layout=True, **extra)
        return d

    got, want = _on_both_paths(monkeypatch, call, layout)
    assert calc_diff(got, want) < (1e-3 if dtype == "fp8" else 1e-5)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("zero_padding", [True, False])
def test_m_grouped_m_indices(monkeypatch, dtype, zero_padding):
    n, k, m = 40, 128, 3 * ALIGNMENT
    layout = torch.full((m,), -1, dtype=torch.int32)
    layout[:60], layout[ALIGNMENT:ALIGNMENT + 30] = 1, 0  # the third block is padding
    a, b, fn, extra = _m_grouped_operands(dtype, m, n, k)

    def call():
        d = torch.full((m, n), -7.0, dtype=torch.bfloat16)
        fn(a, b, d, layout, use_psum_layout=False, ensure_zero_padding=zero_padding, **extra)
        return d

    got, want = _on_both_paths(monkeypatch, call, layout)
    assert torch.equal(got[2 * ALIGNMENT:], want[2 * ALIGNMENT:])
    assert calc_diff(got[:2 * ALIGNMENT], want[:2 * ALIGNMENT]) < (1e-3 if dtype == "fp8" else 1e-5)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_masked(monkeypatch, dtype):
    g, m, n, k = 2, 64, 48, 96
    masked_m = torch.tensor([0, 50], dtype=torch.int32)
    a, b = torch.randn(g, m, k), torch.randn(g, n, k)
    if dtype == "bf16":
        a, b = a.bfloat16(), b.bfloat16()
        fn, extra = deep_gemm.m_grouped_bf16_gemm_nt_masked, {}
    else:
        a = (a.to(torch.float8_e4m3fn), torch.ones(g, m, k // 32))
        b = (b.to(torch.float8_e4m3fn), torch.full((g, n, k // 32), 2.0))
        fn, extra = deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked, {"recipe": (1, 1, 32)}

    def call():
        d = torch.full((g, m, n), -7.0, dtype=torch.bfloat16)
        fn(a, b, d, masked_m, expected_m=32, **extra)
        return d

    got, want = _on_both_paths(monkeypatch, call, masked_m)
    assert torch.equal(got[0], want[0]) and torch.all(got[1, 50:] == -7.0)
    assert calc_diff(got[1, :50], want[1, :50]) < (1e-3 if dtype == "fp8" else 1e-5)


def _same_logits(got, want):
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3


def test_mqa_logits(monkeypatch):
    s, s_kv = 6, 300
    q, kv, weights = _mqa_inputs(s, s_kv, 4, 32)
    ks, ke = _ranges(s, s_kv)
    got, want = _on_both_paths(monkeypatch, lambda: deep_gemm.fp8_mqa_logits(q.data, (kv.data, kv.sf), weights, ks, ke),
                               ks, ke)
    _same_logits(got, want)


def test_paged_mqa_logits_and_its_schedule(monkeypatch):
    batch, next_n, block_kv, max_ctx = 3, 2, 32, 200
    q, kv, weights, table = _paged_inputs(batch, next_n, 4, 32, block_kv, max_ctx)
    lens = _lengths(batch, next_n, max_ctx)

    def call():
        meta = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, deep_gemm.get_num_sms())
        return deep_gemm.fp8_paged_mqa_logits(q.data, kv.cache, weights, lens, table, meta, max_ctx, clean_logits=True)

    got, want = _on_both_paths(monkeypatch, call, lens, table)
    _same_logits(got, want)




def test_layout_utilities_with_psum_layouts(monkeypatch):
    """The NVIDIA-form packers with a psum layout: ``sf_pack_ue8m0`` has no Ascend kernel, so the Ascend
    path is simulated as NPU tensors see it (``on_ascend`` true, the table serving the host kernel)."""
    mn, counts = 40, [96, 0, 160]
    k_ends = _psum_ends(counts)
    sf = torch.exp2(torch.randint(-4, 5, (sum(-(-k // 32) for k in counts), mn)).float())
    m_ends = torch.tensor([10, 270], dtype=torch.int32)
    sf_m = torch.exp2(torch.randint(-4, 5, (300, 8)).float())
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    monkeypatch.setenv("DG_BACKEND", "host")

    def call():
        return (deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, k_ends, None, 32, ALIGNMENT,
                                                                                 use_psum_layout=True),
                deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf_m, m_ends))

    want = call()
    with monkeypatch.context() as m:
        m.setattr(_lib, "on_ascend", lambda device: True)
        _mark(k_ends, m_ends)
        with DeviceOnly():
            got = call()
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    # 3, 0 and 5 K-blocks: words 1 + 0 + 2 used of the upper bound (8 + 3 G) // 4, the rest 0
    assert got[0].shape == ((8 + 3 * 3) // 4, mn) and torch.all(got[0][3:] == 0)
    assert torch.all(got[1][10:ALIGNMENT] == 0) and torch.all(got[1][270:] == 0)


def test_m_grouped_values_are_checked_only_in_the_debug_mode(monkeypatch):
    """An end row past M and a masked count past M_max are clamped on the device (nothing outside d is
    written); DG_ASCEND_CHECKS=1 reads them and raises."""
    deep_gemm.set_mk_alignment_for_contiguous_layout(ALIGNMENT)
    monkeypatch.setenv("DG_BACKEND", "ascend")
    m, n, k = ALIGNMENT + 30, 24, 64
    a, b = torch.randn(m, k).bfloat16(), torch.randn(2, n, k).bfloat16()
    layout = torch.tensor([40, m + 500], dtype=torch.int32)
    d = torch.zeros(m, n, dtype=torch.bfloat16)
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, use_psum_layout=True)
    want = torch.zeros(m, n)
    want[:40], want[ALIGNMENT:] = a[:40].float() @ b[0].float().t(), a[ALIGNMENT:].float() @ b[1].float().t()
    assert calc_diff(d, want) < 1e-5
    masked_m = torch.tensor([3, 99], dtype=torch.int32)
    dm = torch.full((2, 16, n), -7.0, dtype=torch.bfloat16)
    am = torch.randn(2, 16, k).bfloat16()
    deep_gemm.m_grouped_bf16_gemm_nt_masked(am, b, dm, masked_m, expected_m=16)
    assert calc_diff(dm[1], am[1].float() @ b[1].float().t()) < 1e-5 and torch.all(dm[0, 3:] == -7.0)
    monkeypatch.setenv("DG_ASCEND_CHECKS", "1")
    with pytest.raises(ValueError, match=r"grouped_layout\[1\]: expected group 1 to end within M"):
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, use_psum_layout=True)
    with pytest.raises(ValueError, match=r"masked_m: expected values in \[0, 16\]"):
        deep_gemm.m_grouped_bf16_gemm_nt_masked(am, b, dm, masked_m, expected_m=16)
