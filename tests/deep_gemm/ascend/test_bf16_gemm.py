"""deep_gemm's hand-written Ascend BF16 GEMM (deep_gemm/ascend/bf16_gemm.*) on deepjit's Ascend
twin (CPU tensors), against deep_gemm.reference.bf16_gemm_nt at upstream's BF16 tolerance.

Operands arrive as the public nt/nn/tn/tt wrappers hand them to the entry point: [M, K] / [N, K]
views, K-major or MN-major. Shapes cover exact tiles (128 x 256), tails in M, N and K (100, 72, 200)
and several tiles per block of the persistent grid. Kernels use run-time dimensions
(``compiled_dims=""``) except where the defines path itself is tested, so one compile serves every
shape."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deep_gemm import reference
from deep_gemm.ascend.bf16_gemm import bf16_gemm_nt
from deep_gemm.testing import calc_diff

SHAPES = [(128, 256, 128), (100, 72, 200), (300, 520, 200)]
SENTINEL = -7.0


def _operand(rows: int, k: int, mn_major: bool) -> torch.Tensor:
    """A BF16 ``[rows, K]`` operand, K-major or an MN-major view (as bf16_gemm_nn/tn/tt pass it)."""
    if mn_major:
        return torch.randn(k, rows).bfloat16().t()
    return torch.randn(rows, k).bfloat16()


def _padded_out(m: int, n: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``d`` as an ``[M, N]`` view of a wider buffer filled with a sentinel (row stride N + 24)."""
    buf = torch.full((m, n + 24), SENTINEL, dtype=dtype)
    return buf, buf[:, :n]


def _check(a, b, dtype, c=None, alpha=None, compiled_dims=""):
    m, n = a.shape[0], b.shape[0]
    buf, d = _padded_out(m, n, dtype)
    if c is not None and c.data_ptr() == d.data_ptr():
        d.copy_(c)
        c = d
    ref = torch.empty(m, n, dtype=dtype)
    reference.bf16_gemm_nt(a, b, ref, None if c is None else c.clone(), alpha)
    bf16_gemm_nt(a, b, d, c, alpha, compiled_dims)
    diff = calc_diff(d, ref)
    assert diff < 1e-5, f"{m}x{n}x{a.shape[1]} {dtype}: calc_diff {diff}"
    # FixPipe / the vector epilogue round once from FP32, like the reference: equal up to FP32
    # summation order (and one BF16 ulp where the order flips a rounding).
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(d, ref, **tol)
    assert torch.all(buf[:, n:] == SENTINEL), "d was written outside its [M, N] view"


# Cube-kernel variants (each one compile): every layout, both output dtypes.
VARIANTS = [("nt", torch.float32), ("nt", torch.bfloat16), ("nn", torch.float32), ("tn", torch.bfloat16),
            ("tt", torch.float32)]


@pytest.mark.parametrize(("layout", "dtype"), VARIANTS)
def test_layouts_and_tails(layout, dtype):
    """Cube kernel (no c, no alpha): d = a @ b.T straight out of FixPipe."""
    a_mn, b_mn = layout[0] == "t", layout[1] == "n"
    for m, n, k in SHAPES:
        _check(_operand(m, k, a_mn), _operand(n, k, b_mn), dtype)


@pytest.mark.parametrize("in_place", [False, True])
def test_accumulate_and_alpha_fp32(in_place):
    """Mixed kernel: d = alpha * a @ b.T + c on the vector cores; c separate or c is d."""
    for m, n, k in SHAPES[1:]:
        a, b = _operand(m, k, False), _operand(n, k, False)
        c = torch.randn(m, n)
        _check(a, b, torch.float32, c=c, alpha=-0.5)
        if in_place:
            buf, d = _padded_out(m, n, torch.float32)
            d.copy_(c)
            _check(a, b, torch.float32, c=d, alpha=None)


def test_alpha_bf16_mn_major():
    """Mixed kernel without c, BF16 output, tn operands (both MN-major)."""
    for m, n, k in SHAPES[1:]:
        _check(_operand(m, k, True), _operand(n, k, True), torch.bfloat16, alpha=2.0)


def test_accumulate_bf16():
    """BF16 c into BF16 d (upstream allows BF16 accumulation): c read as BF16, summed in FP32."""
    m, n, k = SHAPES[1]
    _check(_operand(m, k, False), _operand(n, k, False), torch.bfloat16, c=torch.randn(m, n).bfloat16())


def test_compiled_dims_define_shapes():
    """compiled_dims="nk" bakes N and K into the kernel (DG_SHAPE_N / DG_SHAPE_K)."""
    m, n, k = 100, 72, 200
    _check(_operand(m, k, False), _operand(n, k, False), torch.float32, compiled_dims="nk")


@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 300), n=st.integers(1, 300), k=st.integers(1, 300))
def test_random_shapes(m, n, k):
    _check(_operand(m, k, False), _operand(n, k, False), torch.float32)


def test_empty_problem_writes_nothing():
    buf, d = _padded_out(4, 8, torch.float32)
    bf16_gemm_nt(torch.empty(4, 0, dtype=torch.bfloat16), torch.empty(8, 0, dtype=torch.bfloat16), d)
    assert torch.all(buf == SENTINEL)


def test_wide_tile_choice():
    """256 x 256 tiles where they still give each cube core one, 128 x 256 otherwise."""
    from deep_gemm.ascend._launch import cube_block_m
    assert cube_block_m(4096, 4096, 32) == 256
    assert cube_block_m(2048, 1024, 32) == 256       # 8 x 4 wide tiles: exactly one each
    assert cube_block_m(256, 4096, 32) == 128        # 16 wide tiles would leave half the cores idle
    assert cube_block_m(4096, 4096, 1024) == 128


@pytest.mark.parametrize(("layout", "dtype"), [("nt", torch.float32), ("nn", torch.bfloat16), ("tt", torch.float32)])
def test_wide_tiles(monkeypatch, layout, dtype):
    """The 256 x 256 kernel (one L0C stage) on tails in M, N and K and several tiles per block."""
    from deep_gemm.ascend import bf16_gemm as glue
    from tests.deep_gemm.ascend._wide import force_wide_tiles
    seen = force_wide_tiles(monkeypatch, glue)
    a_mn, b_mn = layout[0] == "t", layout[1] == "n"
    # 2404 rows: 10 wide M blocks, a panel of 8 then a partial one of 2
    for m, n, k in [(300, 520, 200), (100, 72, 200), (2404, 600, 48)]:
        _check(_operand(m, k, a_mn), _operand(n, k, b_mn), dtype)
    assert seen and all(d["DG_BLOCK_M"] == 256 for _, d in seen)


def test_tile_walk_crosses_panels():
    """1200 rows: 10 M blocks of 128, a full panel of 8 (cube_gemm.h tile_at) then a partial one of 2;
    5 N blocks, so panels hold 40 and 10 tiles and blocks of the 32-core grid straddle them."""
    _check(_operand(1200, 48, False), _operand(1100, 48, False), torch.float32)
