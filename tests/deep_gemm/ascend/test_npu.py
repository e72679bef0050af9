"""deep_gemm's Ascend kernels on an Ascend 950 (npu-marked; skipped where torch_npu or an NPU is absent):
the public ops on NPU tensors against the same ops served by the reference on CPU copies of the inputs
(DG_BACKEND=reference), at the twin tests' tolerances (calc_diff < 1e-5 BF16, < 1e-3 FP8/FP4), the
layouts, families and shape classes the twin tests cover, plus a sweep of larger M, N, K. Ascend
defaults are passed explicitly so both sides see the same contract. Each case here was also run once
on the twin (NPU = "cpu" with DG_BACKEND=ascend) to check the test itself. Not here yet: the psum
M-grouped, K-grouped, paged MQA logits and sf-transform families, whose reference side needs the
Ascend defaults (alignment 256, int16 scales, the device's core count) that a CPU reference call
does not take."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from tests.deep_gemm.ascend.test_bf16_gemm import SHAPES, VARIANTS
from tests.deep_gemm.ascend.test_bf16_gemm import _operand as _bf16_operand
from tests.deep_gemm.ascend.test_fp8_mx_gemm import EXACT, MANY, TAILS
from tests.deep_gemm.ascend.test_mqa_logits import _ranges
from tests.deep_gemm.ascend.test_served_through_table import _ascend_sf

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
    with_c = kind == "fp8"   # c accumulates into an FP32 d (upstream's contract)
    d = torch.full((m, n), SENTINEL, dtype=torch.float32 if with_c else torch.bfloat16)
    args = (make_a(m, k), make_b(n, k), d, torch.randn(m, n) if with_c else None)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.fp8_fp4_gemm_nt, args,
                                   dict(recipe=(1, 1, 32), alpha=0.5), out=2)
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


@pytest.mark.parametrize(("s", "s_kv", "heads", "head_dim"), [(7, 300, 4, 32), (5, 520, 32, 128), (256, 8192, 32, 128)])
def test_mqa_logits(monkeypatch, s, s_kv, heads, head_dim):
    q = torch.randn(s, heads, head_dim).to(torch.float8_e4m3fn)
    kv = (torch.randn(s_kv, head_dim).to(torch.float8_e4m3fn), torch.rand(s_kv) + 0.5)
    ks, ke = _ranges(s, s_kv)
    got, want = _npu_and_reference(monkeypatch, deep_gemm.fp8_mqa_logits, (q, kv, torch.randn(s, heads), ks, ke))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3
