"""The mHC projection (tile_kernels.ascend.mhc_projection) and post backward (mhc_post_bwd) kernels on the
Ascend twin against the references, and the public mHC ops end to end under TK_BACKEND=ascend:
mhc_pre_norm_fn, mhc_pre_big_fuse (projection, fused norm / split / Sinkhorn, apply-mix), mhc_post's backward and
mhc_multilayer_recompute. Tolerances are upstream's: the normalised projections at 1e-3, d_post / d_comb at
1e-4, the rest torch.testing.assert_close's defaults. Here for the kernels' tiles (ragged token tiles, K
tails, the cube's whole fractals and TF32 halves), the reference compositions the public ops are checked
against on Ascend, and bad inputs refused before any launch; the public ops' empty and zero-width inputs
run on every backend in tests/tile_kernels/mhc/test_mhc_ops.py."""
import pytest
import torch

from tile_kernels import _dispatch
from tile_kernels.ascend import mhc_post_bwd, mhc_projection
from tile_kernels.mhc.norm_fn_kernel import tf32_operand
from tile_kernels.modeling.mhc import ops as mhc
from tile_kernels.modeling.mhc.ops import _forward, post
from tile_kernels.reference import mhc as ref

M, M3 = 4, 24
NAN, INF = float("nan"), float("inf")
# (n0, n1, hidden): K = 4 * hidden is 1200 (tail of the 256-column tile) or 1024; 13 and 17 tokens leave
# a ragged last tile of 8 tokens (projection); the post backward walks 1300 columns as 1024 + 276
SHAPES = [(1, 13, 300), (1, 17, 256)]
SUMS = dict(atol=1e-4, rtol=1e-4)


def _close(got, want, **tol):
    torch.testing.assert_close(got, want, equal_nan=True, **tol)


def _residual(n0, n1, h):
    return (torch.randn(n0, n1, M, h) * (1 + 0.01 * torch.arange(M)).view(1, 1, -1, 1)).bfloat16()


def _fn(h):
    return (torch.randn(M3, M, h) * 1e-4).flatten(1, 2)


@pytest.mark.parametrize("n0,n1,h", SHAPES)
def test_projection(n0, n1, h):
    x, fn = _residual(n0, n1, h), tf32_operand(_fn(h))
    x[0, 0, 0, 3] = NAN  # token 0: NaN everywhere
    x[0, 1, 2, 0] = INF  # token 1: +inf square sum, +-inf or NaN products
    got, want = mhc_projection.projection(x, fn), _forward._projection_ref(x, fn)
    _close(got[0], want[0], atol=1e-5, rtol=1e-5)
    _close(got[1], want[1], atol=1e-5, rtol=1e-5)
    assert torch.isnan(got[0][0, 0]).all() and got[1][0, 1, 0] == INF


def test_tf32_splits_into_two_bf16_halves():
    fn = tf32_operand(torch.randn(4096) * 1e-4)
    fn[:512] = fn[:512].bfloat16().float()  # low half 0 after the plain split
    fn[512:516] = torch.tensor([0.0, INF, -INF, NAN])
    hi, lo = mhc_projection.split_tf32(fn)
    finite = torch.isfinite(fn)
    assert torch.equal((hi.float() + lo.float())[finite], fn[finite])  # exact: BF16 products of each are exact
    nonzero = finite & (fn != 0)  # r = +-Inf times each half: an infinity of fn's sign, never Inf * 0
    assert (hi.float()[nonzero].sign() == fn[nonzero].sign()).all()
    assert (lo.float()[nonzero].sign() == fn[nonzero].sign()).all()
    for half in (hi, lo):  # r * (+-Inf or NaN) twice: the reference's product
        _close(half.float()[~finite], fn[~finite])


def test_cube_serves_whole_fractal_k(monkeypatch):
    """The cube kernel serves K in whole 16-column fractals: 45 tokens over two 32-token tiles (13-row tail),
    K = 1200 as 4 tiles of 256 and 11 of 16; 6 tokens with K = 144 below one tile. K = 300 keeps to the
    SIMT kernel."""
    from tile_kernels._lib import LIB

    built, run = [], LIB.run_tilelang
    monkeypatch.setattr(LIB, "run_tilelang", lambda build, *a: (built.append(build.__name__), run(build, *a))[1])
    for (n0, n1, h), kernels in (((1, 45, 300), ["build_cube", "build_sqrsum"]),
                                 ((2, 3, 36), ["build_cube", "build_sqrsum"]), ((1, 3, 75), ["build"])):
        x, fn = _residual(n0, n1, h), tf32_operand(_fn(h))
        x[0, 2, 1, 7] = -INF
        built.clear()
        got, want = mhc_projection.projection(x, fn), _forward._projection_ref(x, fn)
        assert built == kernels
        _close(got[0], want[0], atol=1e-5, rtol=1e-5)
        _close(got[1], want[1], atol=1e-5, rtol=1e-5)
        assert torch.isinf(got[0][0, 2]).all()


@pytest.mark.parametrize("g_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n0,n1,h", [(2, 3, 1300), (1, 2, 256)])
def test_post_backward(n0, n1, h, g_dtype):
    x, residual = torch.randn(n0, n1, h).bfloat16(), torch.randn(n0, n1, M, h).bfloat16()
    post_mix, comb = torch.randn(n0, n1, M, 1), torch.randn(n0, n1, M, M)
    g = torch.randn(n0, n1, M, h).to(g_dtype)
    g[0, 0, 1, 5] = NAN
    residual[0, 1, 2, 9] = INF
    got = mhc_post_bwd.post_bwd(x, residual, post_mix, comb, g)
    want = post._post_bwd_ref(x, residual, post_mix, comb, g)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        _close(a, b, **(SUMS if i >= 2 else {}))


@pytest.fixture
def ascend(monkeypatch):
    monkeypatch.setenv("TK_BACKEND", "ascend")


def test_pre_norm_fn_and_big_fuse(ascend):
    residual, fn = _residual(1, 13, 300), _fn(300)
    dev = residual.device
    for op, args in (("mhc_projection", (residual, fn)), ("mhc_pre_big_fuse", (residual, fn, *[None] * 7))):
        assert _dispatch.TABLE.serves(op, dev, *args) == "ascend"
    _close(mhc.mhc_pre_norm_fn(residual, fn, None, 1e-6), ref.mhc_pre_norm_fn_ref(residual, tf32_operand(fn), None,
                                                                                   1e-6), atol=1e-3, rtol=1e-3)
    scale, base = torch.randn(3) * 0.1, torch.randn(M3) * 0.1
    args = (scale, base, 1e-6, 1e-6, 1e-6, 2.0, 10)
    got = mhc.mhc_pre_big_fuse(residual, fn, *args)
    with torch.no_grad():  # the composition on the reference path
        want = _forward._pre_big_fuse_ref(residual, fn, *args)
    for a, b in zip(got, want, strict=True):
        _close(a, b.reshape(a.shape), atol=1e-4, rtol=1e-4)
    # bitwise the composed public ops (upstream's contract), here each on its Ascend kernel
    mixes = mhc.mhc_pre_norm_fn(residual, fn, None, 1e-6)
    pre, post_mix, comb = mhc.mhc_pre_split_mixes(mixes, scale, base, M, 2.0, 1e-6)
    composed = (post_mix, mhc.sinkhorn_normalize(comb, 10, 1e-6), mhc.mhc_pre_apply_mix(residual, pre))
    assert all(torch.equal(a, b) for a, b in zip(got, composed, strict=True))


def test_post_autograd_and_recompute(ascend):
    x, residual = torch.randn(1, 5, 256).bfloat16(), torch.randn(1, 5, M, 256).bfloat16()
    post_mix, comb = torch.randn(1, 5, M, 1), torch.randn(1, 5, M, M)
    d_o = torch.randn(1, 5, M, 256).bfloat16()
    assert _dispatch.TABLE.serves("mhc_post_bwd", x.device, x, residual, post_mix, comb, d_o) == "ascend"
    ins = [t.clone().requires_grad_() for t in (x, residual, post_mix, comb)]
    out = mhc.mhc_post(*ins)
    out.backward(d_o)
    want = post._post_bwd_ref(x, residual, post_mix, comb, d_o)
    for i, (t, w) in enumerate(zip(ins, want, strict=True)):
        _close(t.grad, w, **(SUMS if i >= 2 else {}))
    # two layers of the residual stream: apply-mix and post kernels in turn
    pre = [torch.rand(1, 5, M, 1) for _ in range(2)]
    layer_in = [torch.empty(1, 5, 256, dtype=torch.bfloat16) for _ in range(2)]
    res_out = [torch.empty(1, 5, M, 256, dtype=torch.bfloat16)]
    mhc.mhc_multilayer_recompute(residual, pre, [x], [post_mix], [comb], layer_in, res_out)
    r1 = ref.mhc_post_ref(x, residual, post_mix, comb)
    _close(layer_in[0], ref.mhc_pre_apply_mix_ref(residual.float(), pre[0]))
    _close(res_out[0], r1)
    _close(layer_in[1], ref.mhc_pre_apply_mix_ref(r1.float(), pre[1]))


def test_bad_input_is_refused_before_any_launch(ascend, monkeypatch):
    from tile_kernels._lib import LIB

    launched = []
    monkeypatch.setattr(LIB, "run_tilelang", lambda *a: launched.append(a))
    r = torch.randn(1, 3, M, 64).bfloat16()
    bad = [lambda: mhc.mhc_post(r[:, :, 0].float(), r, torch.rand(1, 3, M, 1), torch.rand(1, 3, M, M)),
           lambda: mhc.mhc_post_bwd(r[:, :, 0], r, torch.rand(1, 3, M, 2), torch.rand(1, 3, M, M), r),
           lambda: mhc.mhc_pre_apply_mix(r, torch.rand(1, 3, M, 1).double()),
           lambda: mhc.sinkhorn_normalize(torch.rand(3, M, M + 1)),
           lambda: mhc.mhc_pre_split_mixes(torch.rand(1, 3, M3 + 1), torch.rand(3), torch.rand(M3), M, 1.0, 1e-6),
           lambda: mhc.mhc_pre_norm_fn(r, torch.rand(M3, M * 64 + 1), None, 1e-6),
           lambda: mhc.mhc_pre_big_fuse(r, torch.rand(M3, M * 64), torch.rand(2), torch.rand(M3), 1e-6, 1e-6, 1e-6,
                                        1.0, 10),
           lambda: mhc.mhc_head_compute_mix(torch.rand(1, 3, M), torch.rand(2), torch.rand(M), 1e-6),
           lambda: mhc.expand_to_mhc(r[:, :, 0], M)]  # not contiguous
    for call in bad:
        with pytest.raises((ValueError, TypeError)):
            call()
    assert not launched
