"""deep_gemm's hand-written Ascend MX FP8 GEMM (deep_gemm/ascend/fp8_mx_gemm.*, asc_mmad_mx) on
deepjit's Ascend twin, against deep_gemm.reference.fp8_fp4_gemm_nt at upstream's FP8 tolerance:
exact tiles, M/N/K tails (an odd count of 32-element scale blocks), several tiles per block, both
output dtypes, and the re-packing of FP32 scales into Ascend's int16 UE8M0 pairs."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deep_gemm import reference
from deep_gemm._operands import QuantOperand
from deep_gemm.ascend.fp8_mx_gemm import ascend_scales, fp8_gemm_nt
from deep_gemm.testing import calc_diff

SHAPES = [(128, 256, 256), (100, 72, 200), (300, 520, 320)]


def _operand(mn: int, k: int) -> QuantOperand:
    data = (torch.randn(mn, k) * 8).to(torch.float8_e4m3fn)
    sf = torch.exp2(torch.randint(-6, 7, (mn, -(-k // 32))).float())
    return QuantOperand(data, sf, False, True, mn, k, None, 1, 32)


def _check(m, n, k, dtype):
    a, b = _operand(m, k), _operand(n, k)
    d = torch.full((m, n), -7.0, dtype=dtype)
    ref = torch.empty_like(d)
    reference.fp8_fp4_gemm_nt(a, b, ref)
    fp8_gemm_nt(a, b, d, compiled_dims="")
    diff = calc_diff(d, ref)
    assert diff < 1e-3, f"{m}x{n}x{k} {dtype}: calc_diff {diff}"
    # FP32 sums of scaled products reach 2^20: allow summation-order noise relative to the output's size
    scale = float(ref.float().abs().max()) or 1.0
    tol = dict(rtol=1e-3, atol=1e-5 * scale) if dtype == torch.float32 else dict(rtol=8e-3, atol=4e-3 * scale)
    torch.testing.assert_close(d.float(), ref.float(), **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_shapes(m, n, k, dtype):
    _check(m, n, k, dtype)


@settings(max_examples=5, deadline=None)
@given(m=st.integers(1, 260), n=st.integers(1, 300), k=st.integers(1, 300))
def test_random_shapes(m, n, k):
    _check(m, n, k, torch.float32)


def test_scale_packing():
    sf = torch.tensor([[2.0 ** -3, 1.0, 2.0 ** 5]])
    packed = ascend_scales(sf)
    assert packed.dtype == torch.int16 and packed.shape == (1, 2)
    assert packed.view(torch.uint8).tolist() == [[124, 127, 132, 127]]


@pytest.mark.parametrize("what", ["c", "alpha", "gran", "mn_major"])
def test_unserved_forms_raise_before_writing(what):
    a, b = _operand(32, 64), _operand(16, 64)
    d = torch.full((32, 16), -7.0)
    kwargs = {}
    if what == "c":
        kwargs["c"] = d
    elif what == "alpha":
        kwargs["alpha"] = 2.0
    elif what == "gran":
        a.gran_k = 128
    else:
        a.k_major = False
    with pytest.raises(NotImplementedError, match="fp8_fp4_gemm_nt on Ascend"):
        fp8_gemm_nt(a, b, d, **kwargs)
    assert torch.all(d == -7.0)
