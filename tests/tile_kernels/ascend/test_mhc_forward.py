"""The mHC forward kernels (tile_kernels.ascend.mhc_mix / mhc_sinkhorn / mhc_streams) on the Ascend twin
against the references at upstream's tolerances (torch.testing.assert_close defaults, as upstream's mHC
tests), NaN and +-Inf where the reference puts them. Token counts and hidden sizes are symbolic in every
kernel, so each shape class below reuses one lowering per kernel (m = 4, DeepSeek's stream count). Here
for the kernels' tiles (tokens over several cores with a ragged last tile, a 276-column tail of the
1024-column tile) and the forms the table leaves to the reference; the public ops' contract, empty inputs
included, runs on every backend in tests/tile_kernels/mhc/."""
import pytest
import torch

import tile_kernels
from tile_kernels import _dispatch
from tile_kernels.ascend import mhc_mix, mhc_sinkhorn, mhc_streams
from tile_kernels.modeling.mhc.ops import _forward
from tile_kernels.reference import mhc as ref

M, M3 = 4, 24
NAN, INF = float("nan"), float("inf")
# (n0, n1, hidden): a few tokens in one tile, and tokens over several cores with a ragged last tile (the
# per-token mix kernels stage 85 to 512 tokens a tile, the stream kernels 2 to 4); hidden 1300 leaves a
# 276-column tail of the 1024-column tile. The twin runs the stream kernels' SIMT passes slowly: few tokens.
SHAPES = [(1, 7, 256), (2, 300, 1300)]
STREAM_SHAPES = [(1, 7, 256), (2, 11, 1300)]


def _close(got, want, **tol):
    torch.testing.assert_close(got, want, equal_nan=True, **tol)


def _specials(x):
    """NaN, +Inf and -Inf at the start of the flattened tensor (in the first token)."""
    x.view(-1)[:3] = torch.tensor([NAN, INF, -INF])
    return x


@pytest.mark.parametrize("n0,n1,_h", SHAPES)
def test_head_compute_mix(n0, n1, _h):
    x, scale, base = _specials(torch.randn(n0, n1, M) * 4), torch.randn(1), torch.randn(M)
    _close(mhc_mix.head_mix(x, scale, base, 1e-6), ref.mhc_head_compute_mix_ref(x, scale, base, 1e-6))


@pytest.mark.parametrize("n0,n1,_h", SHAPES)
def test_pre_split_mixes(n0, n1, _h):
    x, scale, base = _specials(torch.randn(n0, n1, M3) * 4), torch.randn(3), torch.randn(M3)
    x[0, 0, M + 1] = NAN  # a post mix
    x[0, 0, 2 * M + 3] = INF  # a comb entry
    got = mhc_mix.split_mixes(x, scale, base, M, 2.0, 1e-6)
    want = ref.mhc_pre_split_mixes_ref(x, scale, base, M, 2.0, 1e-6)
    for g, w in zip(got, want, strict=True):
        _close(g, w)


@pytest.mark.parametrize("n0,n1,h", SHAPES)
def test_norm(n0, n1, h):
    mul, sqrsum = _specials(torch.randn(n0, n1, M3) * 10), torch.rand(n0, n1, 1) * 100
    sqrsum[0, 1 % n1] = NAN
    sqrsum[0, 2 % n1] = 0.0  # only eps under the root
    _close(mhc_mix.norm(mul, sqrsum, M * h, 1e-6), _forward._norm_ref(mul, sqrsum, M * h, 1e-6))


@pytest.mark.parametrize("n0,n1,_h", SHAPES)
def test_sinkhorn(n0, n1, _h):
    x = torch.randn(n0, n1, M, M) * 3
    x[0, 0, 1, 2] = NAN  # the whole matrix becomes NaN
    x[0, 1 % n1, 0, 0] = INF  # inf - inf in its row's softmax: NaN
    x[0, 2 % n1, 3] = -INF  # a row of -inf: NaN
    x[0, 3 % n1, 2, 1] = -INF  # one -inf: exp gives 0, the matrix stays finite
    got, want = mhc_sinkhorn.sinkhorn(x, 10, 1e-6), ref.sinkhorn_normalize_ref(x, 10, 1e-6)
    _close(got, want)
    assert torch.isfinite(got[0, 3 % n1]).all() and torch.isnan(got[0, 0]).all()


@pytest.mark.parametrize("n0,n1,h", STREAM_SHAPES)
def test_expand_keeps_every_bit(n0, n1, h):
    hidden = torch.randint(-2 ** 15, 2 ** 15, (n0, n1, h), dtype=torch.int16).view(torch.bfloat16)  # NaN payloads too
    got = mhc_streams.expand(hidden, M, None)
    assert torch.equal(got.view(torch.int16), ref.expand_to_mhc_ref(hidden, M).view(torch.int16))
    fp32 = torch.randn(n1, 3)  # 12-byte rows: a short DMA burst
    assert torch.equal(mhc_streams.expand(fp32, 2, None), ref.expand_to_mhc_ref(fp32, 2))


@pytest.mark.parametrize("n0,n1,h", STREAM_SHAPES)
def test_pre_apply_mix(n0, n1, h):
    x, mix = _specials(torch.randn(n0, n1, M, h)).bfloat16(), torch.randn(n0, n1, M, 1)
    _close(mhc_streams.apply_mix(x, mix), ref.mhc_pre_apply_mix_ref(x.float(), mix))


@pytest.mark.parametrize("n0,n1,h", STREAM_SHAPES)
def test_post(n0, n1, h):
    x, residual = _specials(torch.randn(n0, n1, h)).bfloat16(), torch.randn(n0, n1, M, h).bfloat16()
    post, comb = torch.randn(n0, n1, M, 1), torch.randn(n0, n1, M, M)
    residual[0, 1 % n1, 2, 7] = -INF
    comb[0, 2 % n1, 0, 1] = NAN
    _close(mhc_streams.post(x, residual, post, comb, None), ref.mhc_post_ref(x, residual, post, comb))


@pytest.fixture
def ascend(monkeypatch):
    monkeypatch.setenv("TK_BACKEND", "ascend")


def test_public_ops_are_served_by_these_kernels(ascend):
    """The forms the public ops' cases (tests/tile_kernels/mhc/, on every backend) send here."""
    x = torch.randn(1, 7, M, 256).bfloat16()
    dev = x.device
    assert all(_dispatch.TABLE.serves(op, dev, *args) == "ascend" for op, args in (
        ("expand_to_mhc", (x[:, :, 0], M, None)), ("mhc_pre_apply_mix", (x, torch.rand(1, 7, M, 1))),
        ("sinkhorn_normalize", (torch.rand(7, M, M), 10, 1e-6)), ("mhc_norm", (torch.rand(7, M3), None, 1, 0.0)),
        ("mhc_head_compute_mix", (torch.rand(1, 7, M), None, None, 0.0)),
        ("mhc_pre_split_mixes", (torch.rand(1, 7, M3), None, None, M, 1.0, 0.0)),
        ("mhc_post", (x[:, :, 0], x, torch.rand(1, 7, M, 1), torch.rand(1, 7, M, M), None))))


def test_wider_than_the_kernels_goes_to_the_reference(ascend):
    """More than 8 streams (the kernels' UB tiles are sized for up to 8): the table sends each op to the
    reference, as its ``supports`` says, and the public op still answers."""
    m = 9
    x = torch.randn(1, 3, m, 64).bfloat16()
    dev = x.device
    wide = {"mhc_pre_apply_mix": (x, torch.rand(1, 3, m, 1)), "sinkhorn_normalize": (torch.rand(3, m, m), 10, 1e-6),
            "mhc_head_compute_mix": (torch.rand(1, 3, m), None, None, 0.0),
            "mhc_pre_split_mixes": (torch.rand(1, 3, m * (m + 2)), None, None, m, 1.0, 0.0),
            "mhc_post": (x[:, :, 0], x, None, None, None), "mhc_post_bwd": (x[:, :, 0], x, None, None, x),
            "mhc_projection": (x, torch.rand(m * (m + 2), m * 64)), "mhc_pre_big_fuse": (x, *[None] * 8)}
    for op, args in wide.items():
        assert _dispatch.TABLE.serves(op, dev, *args) == "reference", op
        assert "1 to 8" in _dispatch.TABLE[op].ascend.supports
    assert _dispatch.TABLE.serves("mhc_norm", dev, torch.rand(3, 2049), None, 1, 0.0) == "reference"
    comb = torch.randn(3, m, m)
    _close(tile_kernels.modeling.mhc.ops.sinkhorn_normalize(comb), ref.sinkhorn_normalize_ref(comb))
