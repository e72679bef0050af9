"""Scale-factor transforms against plain torch indexing, bit for bit."""
import pytest
import torch

from deep_gemm import host as H


def pow2_sf(*shape):
    return torch.exp2(torch.randint(-20, 10, shape).float())


def ref_pack(sf, mn, gran, per_word):
    rows = sf.repeat_interleave(gran, -2)[..., :mn, :]
    e = ((rows.view(torch.int32) >> 23) & 0xFF).long()
    sk = e.size(-1)
    words = -(-sk // per_word)
    e = torch.nn.functional.pad(e, (0, words * per_word - sk))
    e = e.view(*e.shape[:-1], words, per_word)
    out = sum(e[..., j] << (8 * j) for j in range(per_word))
    return out.to(torch.int64)


@pytest.mark.parametrize("batch", [None, 3])
@pytest.mark.parametrize("mn,sk,gran", [(130, 7, 1), (257, 56, 128), (4, 3, 1), (1000, 70, 1)])
@pytest.mark.parametrize("per_word", [4, 2])
def test_pack_unpack(batch, mn, sk, gran, per_word):
    rows = -(-mn // gran)
    shape = (rows, sk) if batch is None else (batch, rows, sk)
    sf = pow2_sf(*shape)
    words = -(-sk // per_word)
    dtype = torch.int32 if per_word == 4 else torch.int16
    # MN-major output with the MN extent padded to 4 (the TMA-aligned form)
    mn_al = -(-mn // 4) * 4
    lead = () if batch is None else (batch,)
    out = torch.empty(*lead, words, mn_al, dtype=dtype).transpose(-1, -2)[..., :mn, :]
    H.pack_sf_ue8m0(sf, out, gran_mn=gran)
    mask = (1 << (8 * per_word)) - 1
    assert torch.equal(out.to(torch.int64) & mask, ref_pack(sf, mn, gran, per_word))
    back = torch.empty(*lead, mn, sk)
    H.unpack_sf_ue8m0(out, back)
    assert torch.equal(back, sf.repeat_interleave(gran, -2)[..., :mn, :])


def test_transpose_broadcast():
    sf = torch.randn(3, 5, 9)
    out = torch.empty(3, 9, 40).transpose(1, 2)[:, :37]
    H.transpose_sf(sf, out, gran_mn=8)
    assert torch.equal(out, sf.repeat_interleave(8, 1)[:, :37])


@pytest.mark.parametrize("per_word", [4, 2])
def test_pack_strided_input(per_word):
    """K-strided scales (not the vectorised layout) pack the same as their contiguous copy."""
    sf = pow2_sf(70, 203).T        # [203, 70] with K stride 203
    words = -(-70 // per_word)
    dtype = torch.int32 if per_word == 4 else torch.int16
    out = torch.empty(203, words, dtype=dtype)
    H.pack_sf_ue8m0(sf, out)
    mask = (1 << (8 * per_word)) - 1
    assert torch.equal(out.to(torch.int64) & mask, ref_pack(sf.contiguous(), 203, 1, per_word))


def test_transpose_large():
    sf = torch.randn(2, 333, 41)
    out = torch.empty(2, 41, 336).transpose(1, 2)[:, :333]
    H.transpose_sf(sf, out)
    assert torch.equal(out, sf)


def test_transpose_streamed_output():
    """An output over 8 MiB takes the streaming-store path."""
    sf = torch.randn(40000, 60)
    out = torch.empty(60, 40000).T
    H.transpose_sf(sf, out)
    assert torch.equal(out, sf)
