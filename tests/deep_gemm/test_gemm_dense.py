"""Dense FP8/FP4 and BF16 GEMMs on every backend (reference, host, the Ascend twin): every layout, format mix,
accumulation and early return."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.testing.generators import generate_normal, threshold
from deep_gemm.utils import pack_ue8m0_to_int, pack_ue8m0_to_short

from ._kinds import ANY_SCALES_WHY, FP8_ANY_SCALES, fp8_kind
from ._layouts import to_layout

KINDS = [FP8_ANY_SCALES, "fp8_1d1d", "fp8_mx", "fp8xfp4", "fp4"]
# DeepSeek-V3 projection shapes scaled to two cores: (N, K) of q_a / kv_a / o_proj-like GEMMs.
SHAPES = [(1, 264, 896), (64, 576, 512), (129, 256, 384)]


def _fp8_fn(layout):
    return getattr(deep_gemm, f"fp8_fp4_gemm_{layout}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
def test_fp8_fp4_layouts(backend, kind, layout):
    # one shape on the twin (and for nn/tn/tt): the Ascend MX kernel's tails are in ascend/test_fp8_mx_gemm.py
    for m, n, k in SHAPES[1:2] if layout != "nt" or backend == "ascend" else SHAPES:
        for a_mn, b_mn in ((False, False), (m % 2 == 0, True)) if layout == "nt" else ((False, False),):
            case = generate_normal(m, n, k, kind, a_mn, b_mn)
            a, b = to_layout(layout, case.a, case.b)
            _fp8_fn(layout)(a, b, case.d, **case.kwargs)
            diff = calc_diff(case.d, case.ref_d)
            assert diff < threshold(kind), f"{kind} {layout} {m}x{n}x{k}: diff {diff}"


@pytest.mark.parametrize("kind", [FP8_ANY_SCALES, "fp8xfp4"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_fp8_fp4_accumulate(backend, kind, out_dtype):
    case = generate_normal(64, 256, 384, kind, accumulate=True, out_dtype=out_dtype)
    deep_gemm.fp8_fp4_gemm_nt(case.a, case.b, case.d, c=case.c, **case.kwargs)
    assert calc_diff(case.d, case.ref_d) < threshold(kind)
    # in place: c is d
    d = case.c.clone()
    deep_gemm.fp8_fp4_gemm_nt(case.a, case.b, d, c=d, **case.kwargs)
    assert torch.equal(d, case.d)


def test_alpha_scales_product(backend):
    case = generate_normal(32, 128, 256, fp8_kind(backend), accumulate=True, out_dtype=torch.float32)
    d0 = torch.empty_like(case.d)
    deep_gemm.fp8_gemm_nt(case.a, case.b, d0, **case.kwargs)
    deep_gemm.fp8_gemm_nt(case.a, case.b, case.d, c=case.c, alpha=-0.5, **case.kwargs)
    assert torch.allclose(case.d, case.c - 0.5 * d0, rtol=1e-5, atol=1e-3)


def test_scale_containers_agree(backend):
    """FP32, float8_e8m0fnu, int32- and int16-packed UE8M0 scales give the same bits."""
    case = generate_normal(64, 128, 256, "fp8_mx")
    (qa, sfa), (qb, sfb) = case.a, case.b
    deep_gemm.fp8_fp4_gemm_nt(case.a, case.b, case.d, recipe=(1, 1, 32))
    for pack in (lambda s: s.to(torch.float8_e8m0fnu), pack_ue8m0_to_int, pack_ue8m0_to_short):
        d = torch.empty_like(case.d)
        deep_gemm.fp8_fp4_gemm_nt((qa, pack(sfa)), (qb, pack(sfb)), d, recipe=(1, 1, 32))
        assert torch.equal(d, case.d)
    # int16 defaults to recipe (1, 1, 32), int32 needs it explicitly at gran 32
    d = torch.empty_like(case.d)
    deep_gemm.fp8_fp4_gemm_nt((qa, pack_ue8m0_to_short(sfa)), (qb, pack_ue8m0_to_short(sfb)), d)
    assert torch.equal(d, case.d)


def test_fp4_container_dtypes_agree(backend):
    case = generate_normal(32, 64, 128, "fp4")
    (qa, sfa), (qb, sfb) = case.a, case.b
    deep_gemm.fp8_fp4_gemm_nt(case.a, case.b, case.d, **case.kwargs)
    d = torch.empty_like(case.d)
    as_x2 = lambda t: t.view(torch.float4_e2m1fn_x2)
    deep_gemm.fp8_fp4_gemm_nt((as_x2(qa), sfa), (as_x2(qb), sfb), d, **case.kwargs)
    assert torch.equal(d, case.d)


def test_dequantised_product_exact_small_case(backend):
    """A 2x2 FP8 block product worked out by hand: scales multiply the exact FP8 values."""
    a = torch.tensor([[1.0, 2.0], [0.5, -3.0]]).to(torch.float8_e4m3fn)
    b = torch.tensor([[4.0, 1.0], [-2.0, 0.25]]).to(torch.float8_e4m3fn)
    sfa = torch.tensor([[2.0], [0.5]])       # per row, gran (1, 128)
    sfb = torch.tensor([[0.25]])             # one 128x128 block
    d = torch.empty(2, 2, dtype=torch.float32)
    deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d)
    # row0: 2*0.25*[1*4+2*1, 1*-2+2*.25] = 0.5*[6, -1.5]; row1: 0.5*0.25*[0.5*4-3, -1-0.75] = 0.125*[-1, -1.75]
    assert d.tolist() == [[3.0, -0.75], [-0.125, -0.21875]]


def test_early_returns(backend):
    a = (torch.empty(0, 128, dtype=torch.float8_e4m3fn), torch.empty(0, 1))
    b = (torch.zeros(128, 128, dtype=torch.float8_e4m3fn), torch.ones(1, 1))
    d = torch.empty(0, 128, dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt(a, b, d)                        # M == 0: nothing to do
    a = (torch.empty(4, 0, dtype=torch.float8_e4m3fn), torch.empty(4, 0))
    b = (torch.empty(8, 0, dtype=torch.float8_e4m3fn), torch.empty(1, 0))
    d = torch.full((4, 8), 7.0, dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt(a, b, d)                        # K == 0 without c: zeros
    assert torch.equal(d, torch.zeros_like(d))
    c = torch.full((4, 8), 3.0, dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt(a, b, d, c=c)                   # K == 0 with c: d = c
    assert torch.equal(d, c)
    deep_gemm.bf16_gemm_nt(torch.empty(4, 0, dtype=torch.bfloat16), torch.empty(8, 0, dtype=torch.bfloat16), d)
    assert torch.equal(d, torch.zeros_like(d))


@pytest.mark.backends("reference", "host", why=ANY_SCALES_WHY)
def test_non_power_of_two_scales(backend):
    """Exact FP32 scales on the FP8 gran-128 path (SM90 contract); refused for MX formats (gran 32, FP4)."""
    case = generate_normal(16, 128, 128, "fp8")    # use_ue8m0=False: arbitrary FP32 scales
    deep_gemm.fp8_gemm_nt(case.a, case.b, case.d)
    assert calc_diff(case.d, case.ref_d) < 1e-3
    a, sfa = case.a
    b, sfb = case.b
    with pytest.raises(ValueError, match="powers of two"):
        deep_gemm.fp8_gemm_nt((a, sfa.repeat_interleave(4, 1)), (b, sfb.repeat_interleave(128, 0).repeat_interleave(4, 1)),
                              case.d, recipe=(1, 1, 32))


@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_bf16_layouts(backend, layout, out_dtype):
    # one shape on the twin: the Ascend BF16 kernel's tails are in ascend/test_bf16_gemm.py
    for m, n, k in SHAPES[1:2] if backend == "ascend" else SHAPES:
        case = generate_normal(m, n, k, "bf16", accumulate=out_dtype == torch.float32, out_dtype=out_dtype)
        a, b = to_layout(layout, case.a, case.b)
        getattr(deep_gemm, f"bf16_gemm_{layout}")(a, b, case.d, c=case.c)
        assert calc_diff(case.d, case.ref_d) < 1e-5


def test_bf16_mn_major_operands(backend):
    case = generate_normal(64, 128, 256, "bf16", a_mn_major=True, b_mn_major=True)
    deep_gemm.bf16_gemm_nt(case.a, case.b, case.d)
    assert calc_diff(case.d, case.ref_d) < 1e-5


@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
def test_cublaslt_baseline(layout):
    case = generate_normal(32, 64, 128, "bf16", accumulate=True, out_dtype=torch.float32)
    a, b = to_layout(layout, case.a, case.b)
    getattr(deep_gemm, f"cublaslt_gemm_{layout}")(a, b, case.d, c=case.c)
    assert calc_diff(case.d, case.ref_d) < 6e-7


def test_aliases_are_the_same_objects():
    for layout in ("nt", "nn", "tn", "tt"):
        assert getattr(deep_gemm, f"fp8_gemm_{layout}") is getattr(deep_gemm, f"fp8_fp4_gemm_{layout}")
