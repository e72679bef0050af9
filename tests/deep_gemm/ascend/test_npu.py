"""deep_gemm's Ascend kernels on an Ascend 950 (npu-marked; skipped where torch_npu or an NPU is absent):
the public ops on NPU tensors against the same ops served by the reference on CPU copies of the inputs
(DG_BACKEND=reference), at the twin tests' tolerances (calc_diff < 1e-5 BF16, < 1e-3 FP8/FP4), the
layouts, families and shape classes the twin tests cover (every family of deep_gemm/ascend: dense, psum M-grouped, masked,
m_indices, K-grouped, MQA and paged MQA logits, sf transforms), plus larger shapes on a real NPU. The Ascend
contract is made explicit so both sides see it: mk alignment 256, int16 scales, use_psum_layout, the
scheduler's num_sms. NPU_TESTS_ON_TWIN=1 runs this file on the twin (tests/testkit/npu.py), with the
small shapes only."""
import pytest
import torch

import deep_gemm
from deep_gemm import _dispatch, formats, runtime
from deep_gemm.testing import calc_diff
from deep_gemm.testing.generators import threshold
from tests.deep_gemm.ascend._grouped import SENTINEL, psum_ends
from tests.deep_gemm.ascend.test_bf16_gemm import SHAPES, VARIANTS
from tests.deep_gemm.ascend.test_bf16_gemm import _operand as _bf16_operand
from tests.deep_gemm.ascend.test_fp8_mx_gemm import EXACT, MANY, TAILS
from tests.deep_gemm.ascend.test_m_grouped_m_indices import _m_indices
from tests.deep_gemm.ascend.test_m_grouped_m_indices import _op as _m_indices_op
from tests.deep_gemm.ascend.test_m_grouped_m_indices import _operands as _m_indices_operands
from tests.deep_gemm.ascend.test_mqa_logits import _ranges
from tests.deep_gemm.ascend.test_paged_mqa_logits import _inputs as _paged_inputs
from tests.deep_gemm.ascend.test_paged_mqa_logits import _lengths as _paged_lengths
from tests.deep_gemm.ascend.test_served_through_table import _ascend_sf
from tests.deep_gemm.ascend.test_sf_layout import _scales
from tests.testkit.npu import DEVICE as NPU
from tests.testkit.npu import ON_TWIN

pytestmark = pytest.mark.npu
SWEEP = [] if ON_TWIN else [(1024, 2048, 1024), (2048, 1536, 4096), (4000, 7168, 2112)]


def _to(x, dev):
    if isinstance(x, torch.Tensor):
        return x.to(dev)
    if isinstance(x, tuple | list):
        return type(x)(_to(v, dev) for v in x)
    return x


@pytest.fixture(autouse=True)
def _ascend_alignment(monkeypatch):
    """The Ascend mk alignment (256) for both sides: the CPU reference call would take NVIDIA's 128."""
    monkeypatch.setattr(runtime._state, "mk_alignment", runtime.ASCEND_MK_ALIGNMENT)


def _npu_and_reference(monkeypatch, op, args: tuple, kwargs: dict | None = None, out: int | None = None,
                       backend: str = "reference"):
    """(NPU result on CPU, reference result): ``op`` on NPU copies of ``args`` and on CPU clones with
    DG_BACKEND=``backend``; the result is the return value, or the in-place ``args[out]``."""
    kwargs = kwargs or {}
    npu_args = _to(args, NPU)
    served, select = [], _dispatch.TABLE.select

    def record(name, device, *a, **k):
        backend, fn = select(name, device, *a, **k)
        served.append((name, backend))
        return backend, fn

    with monkeypatch.context() as m:
        m.setattr(_dispatch.TABLE, "select", record)
        got = op(*npu_args, **kwargs)
    # every table call of the NPU side picks the Ascend kernel (no silent reference on the device)
    assert all(b == "ascend" for _, b in served), served
    got = (npu_args[out] if out is not None else got).cpu()
    cpu_args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    with monkeypatch.context() as m:   # restores the twin mode's DG_BACKEND=ascend after
        m.setenv("DG_BACKEND", backend)
        want = op(*cpu_args, **kwargs)
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
    return (torch.randn(mn, k) * 4).to(torch.float8_e4m3fn), _ascend_sf(mn, k)[0]


def _fp4(mn, k):
    return torch.randint(0, 256, (mn, k // 2), dtype=torch.uint8).view(torch.int8), _ascend_sf(mn, k)[0]


KINDS = {"fp8": (_fp8, _fp8), "fp4": (_fp4, _fp4), "fp8xfp4": (_fp8, _fp4)}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(("m", "n", "k"), [EXACT, TAILS, MANY] + SWEEP)
def test_mx_gemm(monkeypatch, kind, m, n, k):
    make_a, make_b = KINDS[kind]
    with_c = kind == "fp8"   # c accumulates into an FP32 d (upstream's contract)
    d = torch.full((m, n), SENTINEL, dtype=torch.float32 if with_c else torch.bfloat16)
    args = (make_a(m, k), make_b(n, k), d, torch.randn(m, n) if with_c else None)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.fp8_fp4_gemm_nt, args,
                                   dict(recipe=(1, 1, 32), alpha=0.5), out=2)
    assert calc_diff(got, want) < 1e-3


MASKED = [([0, 50, 64], 64, 48, 96)] + ([] if ON_TWIN else [([0, 700, 1024], 1024, 2048, 512)])


@pytest.mark.parametrize(("masked", "m", "n", "k"), MASKED)
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


@pytest.mark.parametrize(("s", "s_kv", "heads", "head_dim"),
                         [(7, 300, 4, 32), (5, 520, 32, 128)] + ([] if ON_TWIN else [(256, 8192, 32, 128)]))
def test_mqa_logits(monkeypatch, s, s_kv, heads, head_dim):
    q = torch.randn(s, heads, head_dim).to(torch.float8_e4m3fn)
    kv = (torch.randn(s_kv, head_dim).to(torch.float8_e4m3fn), torch.rand(s_kv) + 0.5)
    ks, ke = _ranges(s, s_kv)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.fp8_mqa_logits, (q, kv, torch.randn(s, heads), ks, ke))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3


# (rows per group, M, N, K): a zero-sized group, groups shorter and longer than a tile, a ragged tail
PSUM = [([300, 0, 40], 1024, 72, 128)] + ([] if ON_TWIN else [([1500, 0, 700, 2048], 6144, 2048, 1024)])
ALIGN = runtime.ASCEND_MK_ALIGNMENT


def _check_psum(monkeypatch, op, a, b, counts, m, n, tol):
    ends = psum_ends(counts, ALIGN)
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    got, want = _npu_and_reference(monkeypatch, op, (a, b, d, ends), dict(use_psum_layout=True), out=2)
    assert torch.equal(got == SENTINEL, want == SENTINEL), "gap rows zeroed or kept exactly as the reference"
    assert calc_diff(got, want) < tol


@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize(("counts", "m", "n", "k"), PSUM)
def test_m_grouped_bf16_psum(monkeypatch, layout, counts, m, n, k):
    g = len(counts)
    b = torch.randn(g, n, k).bfloat16()
    op = deep_gemm.m_grouped_bf16_gemm_nt_contiguous
    if layout == "nn":
        b, op = b.transpose(1, 2).contiguous(), deep_gemm.m_grouped_bf16_gemm_nn_contiguous
    _check_psum(monkeypatch, op, torch.randn(m, k).bfloat16(), b, counts, m, n, 1e-5)


def _grouped_quant(make, g, mn, k):
    """Per-group operands of ``make`` (data, Ascend int16 scales), stacked to ``[G, ...]``, scales MN-major."""
    parts = [make(mn, k) for _ in range(g)]
    return torch.stack([p[0] for p in parts]), torch.stack([p[1].t() for p in parts]).transpose(1, 2)


# nn takes B MN-major: FP8 only (FP4 is packed along K)
@pytest.mark.parametrize(("kind", "layout"), [("fp8", "nt"), ("fp4", "nt"), ("fp8", "nn")])
@pytest.mark.parametrize(("counts", "m", "n", "k"), PSUM)
def test_m_grouped_mx_psum(monkeypatch, kind, layout, counts, m, n, k):
    make, _ = KINDS[kind]
    b = _grouped_quant(make, len(counts), n, k)
    op = deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous
    if layout == "nn":
        b, op = (b[0].transpose(1, 2).contiguous(), b[1].transpose(1, 2)), deep_gemm.m_grouped_fp8_fp4_gemm_nn_contiguous
    args = (make(m, k), b, torch.full((m, n), SENTINEL, dtype=torch.bfloat16), psum_ends(counts, ALIGN))
    got, want = _npu_and_reference(monkeypatch, op, args, dict(recipe=(1, 1, 32), use_psum_layout=True), out=2)
    assert torch.equal(got == SENTINEL, want == SENTINEL)
    assert calc_diff(got, want) < 1e-3


# (kind, layout, ensure_zero_padding): the zero padding is a second store after the tile's (ordered on the twin;
# this checks the order on an NPU)
@pytest.mark.parametrize(("kind", "layout", "zero_padding"),
                         [("bf16", "nt", True), ("bf16", "nn", False), ("fp8_mx", "nt", True), ("fp4", "nt", False)])
def test_m_grouped_m_indices(monkeypatch, kind, layout, zero_padding):
    counts, m, n, k = [200, 0, 300], 1024, 72, 200
    a, b, extra = _m_indices_operands(kind, layout, m, n, k, len(counts))
    m_indices = _m_indices(counts, ALIGN, m)
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    got, want = _npu_and_reference(monkeypatch, _m_indices_op(kind, layout), (a, b, d, m_indices),
                                   dict(use_psum_layout=False, ensure_zero_padding=zero_padding, **extra), out=2)
    block_first = m_indices[torch.arange(m) // ALIGN * ALIGN]
    computed = (m_indices >= 0) if zero_padding else (block_first >= 0)
    assert torch.all(got[~computed] == (0.0 if zero_padding else SENTINEL))
    assert calc_diff(got[computed], want[computed]) < threshold(kind)


@pytest.mark.parametrize("kind", list(KINDS))
def test_m_grouped_mx_masked(monkeypatch, kind):
    masked, m, n, k = [0, 50, 64], 64, 48, 128
    g = len(masked)
    make_a, make_b = KINDS[kind]
    a, b = _grouped_quant(make_a, g, m, k), _grouped_quant(make_b, g, n, k)
    d = torch.full((g, m, n), SENTINEL, dtype=torch.bfloat16)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked,
                                   (a, b, d, torch.tensor(masked, dtype=torch.int32), m), dict(recipe=(1, 1, 32)),
                                   out=2)
    assert torch.equal(got == SENTINEL, want == SENTINEL)
    for i, rows in enumerate(masked):
        if rows:
            assert calc_diff(got[i, :rows], want[i, :rows]) < 1e-3


# (K rows per group: multiples of the alignment 256, with an empty group; M, N)
K_GROUPED = [([256, 0, 512], 100, 72)] + ([] if ON_TWIN else [([2048, 0, 4096, 1024], 1024, 2048)])


@pytest.mark.parametrize("kind", ["bf16", "fp8"])
@pytest.mark.parametrize(("ks", "m", "n"), K_GROUPED)
def test_k_grouped_tn(monkeypatch, kind, ks, m, n):
    sum_k, layout = sum(ks), torch.tensor(ks, dtype=torch.int32)
    c = torch.randn(len(ks), m, n)
    d = torch.full_like(c, SENTINEL)
    if kind == "bf16":
        op, kwargs = deep_gemm.k_grouped_bf16_gemm_tn_contiguous, {}
        a, b = torch.randn(sum_k, m).bfloat16(), torch.randn(sum_k, n).bfloat16()
    else:   # FP32 power-of-two scales per 128 K rows, [sum_K / 128, MN]
        op, kwargs = deep_gemm.k_grouped_fp8_gemm_tn_contiguous, dict(recipe=(1, 1, 128))
        a, b = ((torch.randn(sum_k, mn) * 4).to(torch.float8_e4m3fn) for mn in (m, n))
        a, b = (a, _scales(sum_k // 128, m)), (b, _scales(sum_k // 128, n))
    got, want = _npu_and_reference(monkeypatch, op, (a, b, d, ks, layout, c),
                                   dict(use_psum_layout=False, **kwargs), out=2)
    assert calc_diff(got, want) < (1e-5 if kind == "bf16" else 1e-3)


PAGED = [(3, 2, 4, 32, 32, 200)] + ([] if ON_TWIN else [(64, 1, 32, 128, 64, 8192)])


@pytest.mark.parametrize(("batch", "next_n", "heads", "head_dim", "block_kv", "max_ctx"), PAGED)
def test_paged_mqa_logits(monkeypatch, batch, next_n, heads, head_dim, block_kv, max_ctx):
    q, kv, weights, table = _paged_inputs(batch, next_n, heads, head_dim, block_kv, max_ctx)
    lens = _paged_lengths(batch, next_n, max_ctx)

    def op(q, cache, weights, lens, table):   # each side's own worker count, passed explicitly as upstream's callers do
        meta = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, deep_gemm.get_num_sms())
        return deep_gemm.fp8_paged_mqa_logits(q, cache, weights, lens, table, meta, max_ctx, clean_logits=True)

    got, want = _npu_and_reference(monkeypatch, op, (q.data, kv.cache, weights, lens, table))
    assert torch.equal(torch.isinf(got), torch.isinf(want)), "-inf exactly past each length"
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3


@pytest.mark.parametrize(("mn", "k", "recipe", "num_groups"), [(300, 320, (1, 32), None), (130, 200, (128, 32), 3)])
def test_transform_sf(monkeypatch, mn, k, recipe, num_groups):
    lead = () if num_groups is None else (num_groups,)
    sf = _scales(*lead, -(-mn // recipe[0]), -(-k // 32))
    # the host path's Ascend packing is the reference (the reference path keeps FP32 scales)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.transform_sf_into_required_layout,
                                   (formats.pack_ue8m0(sf, torch.int16), mn, k, recipe),
                                   dict(num_groups=num_groups), backend="host")
    assert got.dtype == torch.int16 and torch.equal(got, want)


def test_transform_k_grouped_sf(monkeypatch):
    mn, ends = 40, psum_ends([96, 44, 33], ALIGN)   # groups at K 0, 256 and 512
    k = int(ends[-1])
    sf = _scales(mn, -(-k // 32))
    got, want = _npu_and_reference(monkeypatch, deep_gemm.transform_k_grouped_sf_into_required_layout,
                                   (formats.pack_ue8m0(sf, torch.int16), mn, k, (1, 128, 32), True, ends),
                                   backend="host")
    assert got.dtype == torch.int16 and torch.equal(got, want)
