"""deep_gemm's hand-written Ascend MX GEMM (deep_gemm/ascend/fp8_mx_gemm.*, mx_gemm.h, asc_mmad_mx) on
deepjit's Ascend twin, against deep_gemm.reference.fp8_fp4_gemm_nt at upstream's FP8/FP4 tolerance
(calc_diff < 1e-3): FP8 x FP8 (K- and MN-major), FP4 x FP4, FP8 x FP4 and FP4 x FP8 (the FP4 side widened
inside the GEMM, fp8_fp4_mx_gemm.asc, or by fp4_to_fp8.asc with c / alpha), exact tiles and M/N/K tails
(an odd count of 32-element scale blocks), several tiles per block, both output dtypes, gran_k 128,
c and alpha (the mixed epilogue kernel), the Ascend int16 scale layout and the mantissa rule."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deep_gemm import formats, reference
from deep_gemm._operands import QuantOperand
from deep_gemm.ascend.fp8_mx_gemm import ascend_scales, fp8_gemm_nt
from deep_gemm.testing import calc_diff
from tests.deep_gemm.ascend._fp4 import forbid_widening_launch

EXACT, TAILS, MANY = (128, 256, 256), (100, 72, 200), (300, 520, 320)


def _operand(mn: int, k: int, fp4: bool = False, k_major: bool = True, gran_k: int = 32,
             gran_mn: int = 1) -> QuantOperand:
    sf = torch.exp2(torch.randint(-6, 7, (-(-mn // gran_mn), -(-k // gran_k))).float())
    if fp4:
        data = formats.pack_fp4_codes(torch.randint(0, 16, (mn, k), dtype=torch.uint8))
        return QuantOperand(data, sf, True, True, mn, k, None, gran_mn, gran_k)
    data = (torch.randn(mn, k) * 8).to(torch.float8_e4m3fn)
    if not k_major:
        data = data.t().contiguous().t()
    return QuantOperand(data, sf, False, k_major, mn, k, None, gran_mn, gran_k)


def _pair(kind: str, m: int, n: int, k: int, gran_k: int = 32):
    a_fp4, b_fp4 = {"fp8": (False, False), "fp4": (True, True), "fp8xfp4": (False, True), "fp4xfp8": (True, False)}[kind]
    return _operand(m, k, a_fp4, gran_k=gran_k), _operand(n, k, b_fp4, gran_k=gran_k)


def _check(a, b, dtype=torch.float32, c=None, alpha=None):
    m, n = a.mn, b.mn
    d = torch.full((m, n), -7.0, dtype=dtype)
    ref = torch.empty_like(d)
    reference.fp8_fp4_gemm_nt(a, b, ref, c, alpha)
    fp8_gemm_nt(a, b, d, c, alpha, compiled_dims="")
    diff = calc_diff(d, ref)
    assert diff < 1e-3, f"{m}x{n}x{a.k} {dtype}: calc_diff {diff}"
    # FP32 sums of scaled products reach 2^20: allow summation-order noise relative to the output's size
    scale = float(ref.float().abs().max()) or 1.0
    tol = dict(rtol=1e-3, atol=1e-5 * scale) if dtype == torch.float32 else dict(rtol=8e-3, atol=4e-3 * scale)
    torch.testing.assert_close(d.float(), ref.float(), **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("m", "n", "k"), [EXACT, TAILS, MANY])
def test_fp8_shapes(m, n, k, dtype):
    _check(*_pair("fp8", m, n, k), dtype)


@pytest.mark.parametrize(("kind", "dtype"), [("fp4", torch.float32), ("fp4", torch.bfloat16),
                                             ("fp8xfp4", torch.float32), ("fp4xfp8", torch.bfloat16)])
@pytest.mark.parametrize(("m", "n", "k"), [EXACT, TAILS])
def test_fp4_shapes(kind, m, n, k, dtype):
    _check(*_pair(kind, m, n, k), dtype)


@pytest.mark.parametrize("majors", [(False, True), (False, False)])
def test_mn_major_fp8(majors):
    m, n, k = TAILS
    _check(_operand(m, k, k_major=majors[0]), _operand(n, k, k_major=majors[1]))


def test_gran_k_128_and_block_scales_along_n():
    _check(*_pair("fp8", 70, 90, 330, gran_k=128))
    # the NVIDIA legacy recipe (1, 128, 128): one B scale per 128 x 128 block
    _check(_operand(70, 330, gran_k=128), _operand(200, 330, gran_k=128, gran_mn=128))
    # upstream's FP8 x FP4 recipes: recipe_a (1, 128), recipe_b (1, 32)
    _check(_operand(70, 330, gran_k=128), _operand(90, 330, fp4=True))


@pytest.mark.parametrize(("kind", "dtype", "with_c", "alpha"), [
    ("fp8", torch.bfloat16, True, None), ("fp4", torch.float32, True, 0.5), ("fp8xfp4", torch.float32, False, -2.0)])
def test_c_and_alpha(kind, dtype, with_c, alpha):
    m, n, k = TAILS
    c = torch.randn(m, n).to(dtype) * 100 if with_c else None
    _check(*_pair(kind, m, n, k), dtype, c, alpha)


@pytest.mark.parametrize("kind", ["fp8xfp4", "fp4xfp8"])
def test_mixed_pairs_widen_inside_the_gemm(monkeypatch, kind):
    """No separate widening launch: the vector cores of fp8_fp4_mx_gemm.asc widen the FP4 side into L1."""
    forbid_widening_launch(monkeypatch)
    _check(*_pair(kind, *TAILS), torch.bfloat16 if kind == "fp4xfp8" else torch.float32)


def test_c_is_d():
    a, b = _pair("fp8", *TAILS)
    d = torch.randn(a.mn, b.mn) * 100
    want = torch.empty_like(d)
    reference.fp8_fp4_gemm_nt(a, b, want, d.clone())
    fp8_gemm_nt(a, b, d, d)
    assert calc_diff(d, want) < 1e-3


@settings(max_examples=5, deadline=None)
@given(m=st.integers(1, 260), n=st.integers(1, 300), k=st.integers(1, 150).map(lambda x: 2 * x),
       kind=st.sampled_from(["fp8", "fp4", "fp8xfp4"]))
def test_random_shapes(m, n, k, kind):
    _check(*_pair(kind, m, n, k))


def test_scale_layout():
    sf = torch.tensor([[2.0 ** -3, 1.0, 2.0 ** 5], [2.0, 2.0, 2.0]])
    packed = ascend_scales(sf, 2, 96)
    assert packed.dtype == torch.int16 and packed.shape == (2, 2) and packed.stride() == (1, 2)
    assert packed.t().contiguous().view(torch.uint8).tolist() == [[124, 127, 128, 128], [132, 127, 128, 127]]
    # gran_k 128 repeats each scale over its four 32-blocks; gran_mn repeats it over its rows
    wide = ascend_scales(torch.tensor([[4.0]]), 3, 96, gran_mn=4, gran_k=128)
    assert wide.shape == (3, 2) and bool((formats.unpack_ue8m0(formats.dense(wide))[:, :3] == 4.0).all())


@pytest.mark.parametrize("which", ["a", "b"])
def test_non_zero_mantissa_is_a_value_error_naming_the_argument(which):
    a, b = _pair("fp8", 32, 16, 256, gran_k=128)
    (a if which == "a" else b).sf[0, 1] = 1.5
    d = torch.full((32, 16), -7.0)
    with pytest.raises(ValueError, match=rf"{which}\[1\] values: expected positive powers of two"):
        fp8_gemm_nt(a, b, d)
    assert torch.all(d == -7.0)


def test_unserved_forms_raise_before_writing():
    a, b = _pair("fp8", 32, 16, 64)
    a.gran_k = 64
    d = torch.full((32, 16), -7.0)
    with pytest.raises(NotImplementedError, match="fp8_fp4_gemm_nt on Ascend"):
        fp8_gemm_nt(a, b, d)
    assert torch.all(d == -7.0)


def test_fp4_in_the_ascend_container_and_mn_major_fp4_widened():
    m, n, k = TAILS
    a, b = _pair("fp4", m, n, k)
    a.data = a.data.view(torch.float4_e2m1fn_x2)   # the official Ascend binding's FP4 dtype
    _check(a, b)
    # an MN-major FP4 operand (packed along MN) is served widened to E4M3
    codes = torch.randint(0, 16, (k, n), dtype=torch.uint8)
    b_mn = QuantOperand(formats.pack_fp4_codes(codes).t(), b.sf, True, False, n, k, None, 1, 32)
    _check(a, b_mn)


@pytest.mark.parametrize(("kind", "dtype"), [("fp8", torch.float32), ("fp4", torch.bfloat16)])
def test_wide_tiles(monkeypatch, kind, dtype):
    """The 256 x 256 MX kernel (one L0C stage) on tails and several tiles per block."""
    from deep_gemm.ascend import fp8_mx_gemm as glue
    from tests.deep_gemm.ascend._wide import force_wide_tiles
    seen = force_wide_tiles(monkeypatch, glue)
    for m, n, k in (TAILS, MANY):
        _check(*_pair(kind, m, n, k), dtype)
    assert seen and all(d["DG_BLOCK_M"] == 256 for _, d in seen)
