"""deep_gemm's Ascend kernels on an Ascend 950 (npu-marked; skipped where torch_npu or an NPU is absent):
the public ops on NPU tensors against the same ops served by the reference on CPU copies of the inputs
(DG_BACKEND=reference), at the twin tests' tolerances (calc_diff < 1e-5 BF16, < 1e-3 FP8/FP4), the
layouts, families and shape classes the twin tests cover, plus a sweep of larger M, N, K. Ascend
defaults are passed explicitly (psum layout, alignment 256) so both sides see the same contract."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from tests.deep_gemm.ascend.test_bf16_gemm import SHAPES, VARIANTS
from tests.deep_gemm.ascend.test_bf16_gemm import _operand as _bf16_operand
from tests.deep_gemm.ascend.test_fp8_mx_gemm import EXACT, MANY, TAILS
from tests.deep_gemm.ascend.test_mqa_logits import _ranges
from tests.deep_gemm.ascend.test_paged_mqa_logits import _cache, _lengths
from tests.deep_gemm.ascend.test_served_through_table import _ascend_sf
from tests.deep_gemm.ascend.test_sf_layout import _reference as _sf_reference

pytestmark = pytest.mark.npu
NPU = "npu"   # a string: torch.device("npu") needs torch_npu at import
SENTINEL = -7.0
SWEEP = [(1024, 2048, 1024), (2048, 1536, 4096), (4000, 7168, 2112)]


def _to(x, dev):
    if isinstance(x, torch.Tensor):
        return x.to(dev)
    if isinstance(x, tuple | list):
        return type(x)(_to(v, dev) for v in x)
    return x


def _npu_and_reference(monkeypatch, op, args: tuple, kwargs: dict | None = None, out: int | None = None):
    """(NPU result on CPU, reference result): ``op`` on NPU copies of ``args`` and on CPU clones with
    DG_BACKEND=reference; the result is the return value, or the in-place ``args[out]``."""
    kwargs = kwargs or {}
    npu_args = _to(args, NPU)
    got = op(*npu_args, **kwargs)
    got = (npu_args[out] if out is not None else got).cpu()
    monkeypatch.setenv("DG_BACKEND", "reference")
    cpu_args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    want = op(*cpu_args, **kwargs)
    monkeypatch.delenv("DG_BACKEND")
    return got, (cpu_args[out] if out is not None else want)


BF16_OPS = {"nt": deep_gemm.bf16_gemm_nt, "nn": deep_gemm.bf16_gemm_nn, "tn": deep_gemm.bf16_gemm_tn,
            "tt": deep_gemm.bf16_gemm_tt}


def _bf16_args(layout, m, n, k):
    """Operands as each public layout takes them: a [M, K] (tn/tt: [K, M]), b [N, K] (nn/tt: [K, N])."""
    a = _bf16_operand(m, k, False)
    b = _bf16_operand(n, k, False)
    return (a.t().contiguous() if layout[0] == "t" else a), (b.t().contiguous() if layout[1] == "n" else b)


def _check_bf16(monkeypatch, layout, dtype, m, n, k, c=False, alpha=None):
    a, b = _bf16_args(layout, m, n, k)
    d = torch.full((m, n), SENTINEL, dtype=dtype)
    cc = torch.randn(m, n) if c else None
    got, want = _npu_and_reference(monkeypatch, BF16_OPS[layout], (a, b, d, cc), dict(alpha=alpha), out=2)
    assert calc_diff(got, want) < 1e-5, f"{layout} {m}x{n}x{k}"


@pytest.mark.parametrize(("layout", "dtype"), VARIANTS)
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_bf16_layouts(monkeypatch, layout, dtype, m, n, k):
    _check_bf16(monkeypatch, layout, dtype, m, n, k)


@pytest.mark.parametrize("layout", ["nt", "tn"])
def test_bf16_c_and_alpha(monkeypatch, layout):
    _check_bf16(monkeypatch, layout, torch.float32, *SHAPES[1], c=True, alpha=-0.5)


@pytest.mark.parametrize(("m", "n", "k"), SWEEP)
def test_bf16_sweep(monkeypatch, m, n, k):
    _check_bf16(monkeypatch, "nt", torch.bfloat16, m, n, k)


def _fp8(mn, k):
    return (torch.randn(mn, k) * 4).to(torch.float8_e4m3fn), _ascend_sf(mn, k)


def _fp4(mn, k):
    return torch.randint(0, 256, (mn, k // 2), dtype=torch.uint8).view(torch.int8), _ascend_sf(mn, k)


KINDS = {"fp8": (_fp8, _fp8), "fp4": (_fp4, _fp4), "fp8xfp4": (_fp8, _fp4)}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(("m", "n", "k"), [EXACT, TAILS, MANY] + SWEEP)
def test_mx_gemm(monkeypatch, kind, m, n, k):
    make_a, make_b = KINDS[kind]
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    args = (make_a(m, k), make_b(n, k), d, torch.randn(m, n) if kind == "fp8" else None)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.fp8_fp4_gemm_nt, args,
                                   dict(recipe=(1, 1, 32), alpha=0.5), out=2)
    assert calc_diff(got, want) < 1e-3


def _psum_layout(counts, alignment=256):
    ends, end = [], 0
    for g, count in enumerate(counts):
        end = (0 if g == 0 else -(-end // alignment) * alignment) + count
        ends.append(end)
    return torch.tensor(ends, dtype=torch.int32)


@pytest.mark.parametrize(("counts", "n", "k"), [([100, 0, 72, 130], 72, 200), ([3000, 17, 0, 1024], 2048, 1024)])
def test_m_grouped_psum(monkeypatch, counts, n, k):
    layout = _psum_layout(counts)
    m = -(-int(layout[-1]) // 256) * 256
    a, b = torch.randn(m, k).bfloat16(), torch.randn(len(counts), n, k).bfloat16()
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.m_grouped_bf16_gemm_nt_contiguous, (a, b, d, layout),
                                   dict(use_psum_layout=True), out=2)
    assert calc_diff(got, want) < 1e-5 and torch.equal(got == SENTINEL, want == SENTINEL)
    sfb = torch.stack([_ascend_sf(n, k) for _ in counts])
    fa, fb = _fp8(m, k), ((torch.randn(len(counts), n, k) * 4).to(torch.float8_e4m3fn), sfb)
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous, (fa, fb, d, layout),
                                   dict(recipe=(1, 1, 32), use_psum_layout=True), out=2)
    assert calc_diff(got, want) < 1e-3


@pytest.mark.parametrize(("masked", "m", "n", "k"), [([0, 50, 64], 64, 48, 96), ([0, 700, 1024], 1024, 2048, 512)])
def test_m_grouped_masked(monkeypatch, masked, m, n, k):
    g = len(masked)
    masked_m = torch.tensor(masked, dtype=torch.int32)
    a, b = torch.randn(g, m, k).bfloat16(), torch.randn(g, n, k).bfloat16()
    d = torch.full((g, m, n), SENTINEL, dtype=torch.bfloat16)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.m_grouped_bf16_gemm_nt_masked, (a, b, d, masked_m, m),
                                   out=2)
    assert torch.equal(got == SENTINEL, want == SENTINEL)
    for i, rows in enumerate(masked):
        if rows:
            assert calc_diff(got[i, :rows], want[i, :rows]) < 1e-5


@pytest.mark.parametrize(("ks", "m", "n"), [([128, 0, 256], 72, 90), ([2048, 1024, 0, 4096], 1024, 2048)])
def test_k_grouped(monkeypatch, ks, m, n):
    sum_k = sum(ks)
    a, b = torch.randn(sum_k, m).bfloat16(), torch.randn(sum_k, n).bfloat16()
    layout = torch.tensor(ks, dtype=torch.int32)
    d = torch.randn(len(ks), m, n)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.k_grouped_bf16_gemm_tn_contiguous,
                                   (a, b, d, ks, layout, d.clone()), out=2)
    assert calc_diff(got, want) < 1e-5


@pytest.mark.parametrize(("s", "s_kv", "heads", "head_dim"), [(7, 300, 4, 32), (5, 520, 32, 128), (256, 8192, 32, 128)])
def test_mqa_logits(monkeypatch, s, s_kv, heads, head_dim):
    q = torch.randn(s, heads, head_dim).to(torch.float8_e4m3fn)
    kv = (torch.randn(s_kv, head_dim).to(torch.float8_e4m3fn), torch.rand(s_kv) + 0.5)
    ks, ke = _ranges(s, s_kv)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.fp8_mqa_logits, (q, kv, torch.randn(s, heads), ks, ke))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3


@pytest.mark.parametrize(("batch", "next_n", "heads", "head_dim", "block_kv", "max_ctx"),
                         [(3, 1, 4, 32, 32, 300), (2, 2, 32, 128, 64, 520), (64, 1, 32, 128, 64, 8192)])
def test_paged_mqa_logits(monkeypatch, batch, next_n, heads, head_dim, block_kv, max_ctx):
    pages = -(-max_ctx // block_kv)
    num_pages = batch * pages + 3
    table = torch.randperm(num_pages)[:batch * pages].view(batch, pages).to(torch.int32)
    q = torch.randn(batch, next_n, heads, head_dim).to(torch.float8_e4m3fn)
    lens = _lengths(batch, next_n, max_ctx)
    cache = _cache(num_pages, block_kv, head_dim)
    weights = torch.randn(batch * next_n, heads)
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens.to(NPU), block_kv, deep_gemm.get_num_sms()).cpu()
    got, want = _npu_and_reference(monkeypatch, deep_gemm.fp8_paged_mqa_logits,
                                   (q, cache, weights, lens, table, meta, max_ctx), dict(clean_logits=True))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3


@pytest.mark.parametrize(("mn", "k", "is_sfa"), [(100, 200, True), (4096, 7168, False)])
def test_sf_transform(monkeypatch, mn, k, is_sfa):
    sf = torch.exp2(torch.randint(-6, 7, (mn, -(-k // 32))).float())
    npu = deep_gemm.transform_sf_into_required_layout(sf.to(NPU), mn, k, (1, 1, 32), is_sfa=is_sfa).cpu()
    want = _sf_reference(monkeypatch, deep_gemm.transform_sf_into_required_layout, sf, mn, k, (1, 1, 32),
                         is_sfa=is_sfa)
    assert npu.dtype == torch.int16 and torch.equal(npu, want)
