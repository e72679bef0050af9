"""Scale-factor layout transforms, checked bitwise against constructions written from the spec."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing.generators import generate_normal
from deep_gemm.utils import align, ceil_div, ceil_to_ue8m0


def _pow2_sf(*shape):
    return ceil_to_ue8m0(torch.rand(*shape) * 10 + 1e-3)


def _spec_packed(sf):
    """§9.4: exponent bytes, zero-padded to [B, align(MN,4), align(SK,4)], viewed as int32, MN-major, sliced."""
    squeeze = sf.dim() == 2
    sf = sf.unsqueeze(0) if squeeze else sf
    b, mn, sk = sf.shape
    exps = ((sf.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
    padded = torch.zeros(b, align(mn, 4), align(sk, 4), dtype=torch.uint8)
    padded[:, :mn, :sk] = exps
    words = padded.view(torch.int32)                                   # [B, align(MN,4), SK4]
    out = torch.empty(b, words.size(2), align(mn, 4), dtype=torch.int32).transpose(1, 2)
    out.copy_(words)
    out = out[:, :mn, :]
    return out[0] if squeeze else out


def test_tma_aligned_size():
    assert [deep_gemm.get_tma_aligned_size(x, 4) for x in (0, 1, 4, 5, 4097)] == [0, 4, 4, 8, 4100]
    assert deep_gemm.get_tma_aligned_size(5, 2) == 8 and deep_gemm.get_tma_aligned_size(5, 1) == 16


@pytest.mark.parametrize("mn,sk", [(4, 1), (5, 3), (129, 56)])
@pytest.mark.parametrize("groups", [None, 2])
def test_mn_major_tma_aligned(mn, sk, groups):
    shape = (mn, sk) if groups is None else (groups, mn, sk)
    sf = torch.rand(*shape)
    out = deep_gemm.get_mn_major_tma_aligned_tensor(sf)
    assert torch.equal(out, sf)
    assert out.stride()[-2:] == (1, align(mn, 4))
    if groups:
        assert out.stride(0) == align(mn, 4) * sk
    assert deep_gemm.get_mn_major_tma_aligned_tensor(out) is out
    sf = _pow2_sf(*shape)
    packed = deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    ref = _spec_packed(sf)
    assert packed.shape == ref.shape and packed.stride() == ref.stride() and torch.equal(packed, ref)


def test_transform_sf_forms():
    m, k = 130, 512
    sfa = _pow2_sf(m, k // 128)
    out = deep_gemm.transform_sf_into_required_layout(sfa, m, k, (1, 128, 128), is_sfa=True)
    assert out.dtype == torch.int32 and torch.equal(out, _spec_packed(sfa))
    sfb = _pow2_sf(ceil_div(m, 128), k // 128)           # per-block: broadcast to rows first
    out = deep_gemm.transform_sf_into_required_layout(sfb, m, k, (1, 128, 128), is_sfa=False)
    assert torch.equal(out, _spec_packed(sfb.repeat_interleave(128, 0)[:m]))
    # SM90 forms with disable_ue8m0_cast
    out = deep_gemm.transform_sf_into_required_layout(sfa, m, k, (1, 128), disable_ue8m0_cast=True)
    assert out.dtype == torch.float32 and out.stride() == (1, align(m, 4)) and torch.equal(out, sfa)
    assert deep_gemm.transform_sf_into_required_layout(sfb, m, k, (128, 128), disable_ue8m0_cast=True) is sfb
    # already packed int32 in the ready form is returned as is
    ready = _spec_packed(sfa)
    assert deep_gemm.transform_sf_into_required_layout(ready, m, k, (1, 128)) is ready
    # Ascend int16: K-major input becomes MN-major without padding
    sf32 = _pow2_sf(m, k // 32)
    shorts = deep_gemm.pack_ue8m0_to_short(sf32)
    out = deep_gemm.transform_sf_into_required_layout(shorts, m, k, (1, 1, 32), is_sfa=False)
    assert out.dtype == torch.int16 and out.shape == (m, k // 64) and out.stride() == (1, m)
    assert torch.equal(out, shorts)
    with pytest.raises(ValueError):
        deep_gemm.transform_sf_into_required_layout(sfa, m, k, (1, 128, 128))      # is_sfa missing
    with pytest.raises(ValueError):
        deep_gemm.transform_sf_into_required_layout(sfa, m + 1, k, (1, 128), num_groups=None)


def test_transform_refuses_fp32_scales_that_are_not_powers_of_two():
    # Packing into UE8M0 keeps the exponent only (3.0 would silently become 2.0): refused, naming the value.
    m, k = 8, 256
    sf = _pow2_sf(m, k // 128)
    sf[3, 1] = 3.0
    for recipe, is_sfa in (((1, 128, 128), True), ((1, 128), None)):
        with pytest.raises(ValueError, match="sf values: expected positive powers of two.*got 3.0"):
            deep_gemm.transform_sf_into_required_layout(sf, m, k, recipe, is_sfa=is_sfa)
    # the FP32 form (no cast) keeps 3.0 exactly
    out = deep_gemm.transform_sf_into_required_layout(sf, m, k, (1, 128), disable_ue8m0_cast=True)
    assert float(out[3, 1]) == 3.0


def test_int32_int16_conversion_round_trip():
    mn, k = 37, 320
    sf = _pow2_sf(mn, k // 32)
    as_int = deep_gemm.pack_ue8m0_to_int(torch.nn.functional.pad(sf, (0, 2), value=1.0))
    shorts = deep_gemm.convert_packed_ue8m0(as_int, k, 32, torch.int16)
    assert shorts.shape == (mn, 5) and shorts.stride() == (1, mn)
    assert torch.equal(deep_gemm.unpack_ue8m0_from_short(shorts)[:, :10], sf)
    back = deep_gemm.convert_packed_ue8m0(shorts, k, 32, torch.int32)
    assert torch.equal(deep_gemm.unpack_ue8m0_from_int(back)[:, :10], sf)


def test_k_grouped_packing_never_mixes_groups():
    ks, gran_k, mn = [96, 0, 160], 32, 8
    sf = _pow2_sf(3 + 0 + 5, mn)
    out = deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, torch.tensor(ks, dtype=torch.int32),
                                                                           ks, gran_k, 32)
    assert out.shape == (1 + 0 + 2, mn)
    exps = ((sf.view(torch.int32) >> 23) & 0xFF).t()         # [mn, 8]
    b = out.t().contiguous().view(torch.uint8).view(mn, 3, 4)
    assert torch.equal(b[:, 0, :3].int(), exps[:, 0:3]) and bool((b[:, 0, 3] == 0).all())
    assert torch.equal(b[:, 1].int(), exps[:, 3:7]) and torch.equal(b[:, 2, :1].int(), exps[:, 7:8])
    psum = deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
        sf, torch.tensor([96, 96, 256], dtype=torch.int32), None, gran_k, 32, use_psum_layout=True)
    assert psum.shape == ((8 + 9) // 4, mn) and torch.equal(psum[:3], out)
    # psum layout with ks: the layout places the groups, ks (exact or aligned upper bounds, as upstream's
    # GEMM path passes them) only size the output
    exact = deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
        sf, torch.tensor([96, 96, 256], dtype=torch.int32), ks, gran_k, 32, use_psum_layout=True)
    assert torch.equal(exact, out)
    aligned = deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
        sf, torch.tensor([96, 96, 256], dtype=torch.int32), [256, 0, 256], gran_k, 32, use_psum_layout=True)
    assert aligned.shape == (2 + 0 + 2, mn) and torch.equal(aligned[:3], out) and bool((aligned[3] == 0).all())


def test_gemm_accepts_transformed_scales(backend):
    case = generate_normal(64, 128, 256, "fp8_mx")
    (qa, sfa), (qb, sfb) = case.a, case.b
    deep_gemm.fp8_fp4_gemm_nt(case.a, case.b, case.d, recipe=(1, 1, 32))
    for recipe_kw in ({"recipe": (1, 1, 32)},):
        ta = deep_gemm.transform_sf_into_required_layout(sfa, 64, 256, (1, 32))
        tb = deep_gemm.transform_sf_into_required_layout(sfb, 128, 256, (1, 32))
        d = torch.empty_like(case.d)
        deep_gemm.fp8_fp4_gemm_nt((qa, ta), (qb, tb), d, **recipe_kw)
        assert torch.equal(d, case.d)
        ta16 = deep_gemm.convert_packed_ue8m0(ta, 256, 32, torch.int16)
        tb16 = deep_gemm.convert_packed_ue8m0(tb, 256, 32, torch.int16)
        deep_gemm.fp8_fp4_gemm_nt((qa, ta16), (qb, tb16), d)
        assert torch.equal(d, case.d)
