"""The Ascend scale-factor layout transform (deep_gemm/ascend/sf_layout.*, a vector kernel) on deepjit's
Ascend twin: transform_sf_into_required_layout and transform_k_grouped_sf_into_required_layout with
DG_BACKEND=ascend produce the int16 MN-major UE8M0 pairs bit-exactly as the host reference
(DG_BACKEND=host, int16 input), from FP32 (any major) and int16 input, gran_mn 1 and 128, batched,
odd K-block counts, M- and K-grouped psum layouts (gaps zeroed), without reading sf or the layout on
the host; a known packing checked by hand; non-powers of two reported with DG_ASCEND_CHECKS=1."""
import pytest
import torch

import deep_gemm
from deep_gemm import formats

RECIPE = (1, 128, 32)


def _scales(*shape):
    return torch.exp2(torch.randint(-20, 20, shape).float())


def _reference(monkeypatch, fn, sf, *args, **kwargs):
    """The host path on the int16 form of the same scales (it applies the Ascend layout on CPU)."""
    with monkeypatch.context() as m:
        m.setenv("DG_BACKEND", "host")
        packed = formats.pack_ue8m0(sf, torch.int16) if sf.dtype == torch.float32 else sf
        return fn(packed, *args, **kwargs)


def _ascend(monkeypatch, fn, *args, **kwargs):
    with monkeypatch.context() as m:
        m.setenv("DG_BACKEND", "ascend")
        for name in ("item", "tolist", "any", "all", "__bool__"):
            m.setattr(torch.Tensor, name, lambda *_, n=name: pytest.fail(f"host read ({n}) on the Ascend path"))
        return fn(*args, **kwargs)


def _assert_ascend_form(out, mn, words):
    assert out.dtype == torch.int16 and out.shape[-2:] == (mn, words)
    assert out.stride(-2) == 1 and out.stride(-1) == mn


@pytest.mark.parametrize(("mn", "k", "is_sfa", "num_groups", "mn_major"),
                         [(37, 96, True, None, False), (300, 320, False, None, False), (16, 200, True, 3, True),
                          (130, 64, False, 2, False)])
def test_matches_the_reference(monkeypatch, mn, k, is_sfa, num_groups, mn_major):
    gran_mn = RECIPE[0] if is_sfa else RECIPE[1]
    lead = () if num_groups is None else (num_groups,)
    sf = _scales(*lead, -(-mn // gran_mn), -(-k // 32))
    if mn_major:
        sf = sf.transpose(-1, -2).contiguous().transpose(-1, -2)
    fn = deep_gemm.transform_sf_into_required_layout
    got = _ascend(monkeypatch, fn, sf, mn, k, RECIPE, num_groups=num_groups, is_sfa=is_sfa)
    want = _reference(monkeypatch, fn, sf, mn, k, RECIPE, num_groups=num_groups, is_sfa=is_sfa)
    _assert_ascend_form(got, mn, -(-k // 64))
    assert torch.equal(got, want)
    # int16 input in another layout is re-laid out; already in the Ascend form it is returned as is
    packed = formats.pack_ue8m0(sf, torch.int16).contiguous()
    again = _ascend(monkeypatch, fn, packed, mn, k, RECIPE, num_groups=num_groups, is_sfa=is_sfa)
    assert torch.equal(again, want)
    if gran_mn == 1:
        assert _ascend(monkeypatch, fn, got, mn, k, RECIPE, num_groups=num_groups, is_sfa=is_sfa) is got


def test_known_packing(monkeypatch):
    sf = torch.tensor([[2.0 ** -3, 1.0, 2.0 ** 5], [4.0, 0.5, 1.0]])
    got = _ascend(monkeypatch, deep_gemm.transform_sf_into_required_layout, sf, 2, 96, (1, 32))
    _assert_ascend_form(got, 2, 2)
    # row 0: pairs (124, 127), (132, 0); row 1: (129, 126), (127, 0); low byte = the even K-block
    assert got.contiguous().view(torch.uint8).view(2, 2, 2).tolist() == [[[124, 127], [132, 0]],
                                                                           [[129, 126], [127, 0]]]


def test_m_grouped_psum_gaps_are_zero(monkeypatch):
    deep_gemm.set_mk_alignment_for_contiguous_layout(256)  # the host reference's too
    mn, k = 600, 128
    sf = _scales(mn, k // 32)
    ends = torch.tensor([100, 256, 530], dtype=torch.int32)   # gaps [100, 256) and [530, 768) & mn
    fn = deep_gemm.transform_sf_into_required_layout
    got = _ascend(monkeypatch, fn, sf, mn, k, (1, 32), psum_layout=ends)
    want = _reference(monkeypatch, fn, sf, mn, k, (1, 32), psum_layout=ends)
    assert torch.equal(got, want)
    assert torch.all(got[100:256] == 0) and torch.all(got[530:] == 0) and torch.all(got[:100] != 0)


def test_k_grouped_gaps_are_zero(monkeypatch):
    deep_gemm.set_mk_alignment_for_contiguous_layout(256)  # the host reference's too
    mn = 40
    ends = torch.tensor([96, 300, 512 + 33], dtype=torch.int32)  # groups at 0, 256 and 512 (alignment 256)
    k = 512 + 33
    sf = _scales(mn, -(-k // 32))
    fn = deep_gemm.transform_k_grouped_sf_into_required_layout
    got = _ascend(monkeypatch, fn, sf, mn, k, RECIPE, True, ends)
    want = _reference(monkeypatch, fn, sf, mn, k, RECIPE, True, ends)
    _assert_ascend_form(got, mn, -(-k // 64))
    assert torch.equal(got, want)
    blocks = got.contiguous().view(torch.uint8).view(mn, -1)[:, :-(-k // 32)]
    gap = torch.zeros(blocks.size(1), dtype=torch.bool)
    gap[3:8] = True     # K [96, 256): blocks 3..7
    gap[10:16] = True   # K [300 -> block 10, 512)
    assert torch.all(blocks[:, gap] == 0) and torch.all(blocks[:, ~gap] != 0)


@pytest.mark.parametrize("bad", [3.0, 0.0, -2.0, float("inf"), float("nan")])
def test_non_powers_of_two_reported_in_debug_mode(monkeypatch, bad):
    sf = torch.ones(4, 2)
    sf[2, 1] = bad
    monkeypatch.setenv("DG_ASCEND_CHECKS", "1")
    monkeypatch.setenv("DG_BACKEND", "ascend")
    with pytest.raises(ValueError, match="powers of two"):
        deep_gemm.transform_sf_into_required_layout(sf, 4, 64, (1, 32))
