"""mHC ops, forward and backward, against the autograd of the references (upstream tolerances), empty
and zero-width inputs included."""
import pytest
import torch

from tile_kernels.modeling.mhc.ops import (
    expand_to_mhc,
    mhc_head_compute_mix,
    mhc_post,
    mhc_pre_apply_mix,
    mhc_pre_norm_fn,
    mhc_pre_split_mixes,
    sinkhorn_normalize,
)
from tile_kernels.torch import (
    expand_to_mhc_ref,
    mhc_head_compute_mix_ref,
    mhc_post_ref,
    mhc_pre_apply_mix_ref,
    mhc_pre_norm_fn_ref,
    mhc_pre_split_mixes_ref,
    sinkhorn_normalize_ref,
)

from .._twin import twin_subset

# every test runs on every backend (the Ascend kernels on the twin included)
pytestmark = pytest.mark.usefixtures("backend")

M = 4
M3 = M * (M + 2)


def _pair(t: torch.Tensor):
    return t.clone().requires_grad_(), t.clone().requires_grad_()


def test_sinkhorn_reference_by_hand():
    out = sinkhorn_normalize_ref(torch.zeros(1, 2, 2), repeat=3, eps=0.0)
    assert torch.allclose(out, torch.full((1, 2, 2), 0.5))
    out = sinkhorn_normalize_ref(torch.randn(8, 4, 4), repeat=200, eps=0.0)  # converges to doubly stochastic
    assert torch.allclose(out.sum(-1), torch.ones(8, 4), atol=1e-3)
    assert torch.allclose(out.sum(-2), torch.ones(8, 4), atol=1e-5)


@pytest.mark.parametrize("mult", [2, 4, 8])
def test_expand(mult):
    h = torch.randn(3, 5, 1280).bfloat16()
    a, b = _pair(h)
    out = expand_to_mhc(a, mult)
    ref = expand_to_mhc_ref(b, mult)
    torch.testing.assert_close(out, ref)
    g = torch.randn(out.shape).bfloat16()
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(a.grad, b.grad)
    buf = torch.empty(3, 5, mult, 1280, dtype=torch.bfloat16)
    expand_to_mhc(h, mult, out=buf)
    torch.testing.assert_close(buf, ref)


def test_sinkhorn():
    a, b = _pair(torch.randn(2, 33, M, M))
    out = sinkhorn_normalize(a, repeat=10, eps=1e-6)
    ref = sinkhorn_normalize_ref(b, 10, 1e-6)
    torch.testing.assert_close(out, ref)
    g = torch.randn(out.shape)
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(a.grad, b.grad)


def _norm_fn_data(n1=96, hidden=1280, normw=False):
    residual = (torch.randn(1, n1, M, hidden) * (1 + 0.01 * torch.arange(M)).view(1, 1, -1, 1)).bfloat16()
    fn = (torch.randn(M3, M, hidden) * 1e-4 * (1 + 0.01 * torch.arange(M)).view(1, -1, 1)).flatten(1, 2)
    w = torch.randn(M * hidden) * 0.1 + 1.0 if normw else None
    return residual, fn, w, torch.randn(1, n1, M3)


@pytest.mark.parametrize("hidden,normw", twin_subset(
    [(h, n) for n in (False, True) for h in (1280, 2560)], [(1280, False), (2560, True)], why="the twin runs the cases that take each form once"))
def test_norm_fn_with_gradient_handover(hidden, normw):
    residual, fn, w, g = _norm_fn_data(hidden=hidden, normw=normw)
    r_a, r_b = _pair(residual)
    f_a, f_b = _pair(fn)
    w_a, w_b = _pair(w) if normw else (None, None)
    out = mhc_pre_norm_fn(r_a, f_a, w_a, 1e-6)
    handed = r_a.untyped_storage().grad_from_mhc_post = torch.zeros_like(r_a)
    out.backward(g)
    ref = mhc_pre_norm_fn_ref(r_b, f_b, w_b, 1e-6)
    ref.backward(g)
    torch.testing.assert_close(out, ref, atol=1e-3, rtol=1e-3)
    assert r_a.grad is None  # the gradient went into the handed-over buffer ...
    torch.testing.assert_close(handed, r_b.grad)
    assert not hasattr(r_a.untyped_storage(), "grad_from_mhc_post")  # ... which is consumed
    torch.testing.assert_close(f_a.grad, f_b.grad, atol=3e-2, rtol=1e-3)
    if normw:
        torch.testing.assert_close(w_a.grad, w_b.grad, atol=3e-2, rtol=1e-3)


def test_norm_fn_without_fusion_and_main_grad():
    residual, fn, w, g = _norm_fn_data(normw=True)
    r_a, r_b = _pair(residual)
    f_a, f_b = _pair(fn)
    w_a, w_b = _pair(w)
    f_a.main_grad = torch.ones_like(fn)
    mhc_pre_norm_fn(r_a, f_a, w_a, 1e-6, fuse_grad_acc=False).backward(g)
    mhc_pre_norm_fn_ref(r_b, f_b, w_b, 1e-6).backward(g)
    torch.testing.assert_close(r_a.grad, r_b.grad)
    assert f_a.grad is None
    torch.testing.assert_close(f_a.main_grad - 1, f_b.grad, atol=3e-2, rtol=1e-3)


def test_pre_split_mixes():
    x = torch.randn(2, 40, M3)
    scale, base = torch.rand(3) + 0.5, torch.randn(M3) * 0.1
    args_a = [t.clone().requires_grad_() for t in (x, scale, base)]
    args_b = [t.clone().requires_grad_() for t in (x, scale, base)]
    outs = mhc_pre_split_mixes(*args_a, M, 2.0, 1e-2)
    refs = mhc_pre_split_mixes_ref(*args_b, M, 2.0, 1e-2)
    grads = [torch.randn(o.shape) for o in outs]
    torch.autograd.backward(outs, grads)
    torch.autograd.backward(refs, grads)
    for o, r in zip(outs, refs, strict=True):
        torch.testing.assert_close(o, r, rtol=1e-5, atol=2e-5)
    for a, b in zip(args_a, args_b, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("handover", [False, True])
def test_pre_apply_mix(handover):
    x = torch.randn(2, 17, M, 1280).bfloat16()
    mix = torch.rand(2, 17, M, 1)
    x_a, x_b = _pair(x)
    m_a, m_b = _pair(mix)
    out = mhc_pre_apply_mix(x_a, m_a)
    ref = mhc_pre_apply_mix_ref(x_b, m_b)
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-3)
    g = torch.randn(out.shape).bfloat16()
    start = torch.randn(x.shape).bfloat16()
    if handover:
        buf = x_a.untyped_storage().grad_from_mhc_post = start.clone()
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(m_a.grad, m_b.grad, atol=1e-2, rtol=1e-3)
    if handover:
        assert x_a.grad is None
        torch.testing.assert_close(buf.float(), start.float() + x_b.grad.float(), atol=1e-2, rtol=1e-2)
    else:
        torch.testing.assert_close(x_a.grad, x_b.grad, atol=1e-2, rtol=1e-3)


def test_post():
    s, t, h = 2, 19, 1280
    x, res = torch.randn(s, t, h).bfloat16(), torch.randn(s, t, M, h).bfloat16()
    post, comb = torch.rand(s, t, M, 1), torch.rand(s, t, M, M)
    a = [v.clone().requires_grad_() for v in (x, res, post, comb)]
    b = [v.clone().requires_grad_() for v in (x, res, post, comb)]
    out = mhc_post(*a)
    ref = mhc_post_ref(*b)
    torch.testing.assert_close(out, ref)
    g = torch.randn(out.shape).bfloat16()
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(a[0].grad, b[0].grad)
    torch.testing.assert_close(a[1].grad, b[1].grad)
    torch.testing.assert_close(a[2].grad, b[2].grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a[3].grad, b[3].grad, atol=1e-4, rtol=1e-4)
    handed = a[1].untyped_storage().grad_from_mhc_post
    torch.testing.assert_close(handed, b[1].grad)


def test_head_compute_mix():
    x, scale, base = torch.randn(2, 30, M), torch.rand(1) + 0.5, torch.randn(M)
    a = [v.clone().requires_grad_() for v in (x, scale, base)]
    b = [v.clone().requires_grad_() for v in (x, scale, base)]
    out = mhc_head_compute_mix(*a, 1e-2)
    ref = mhc_head_compute_mix_ref(*b, 1e-2)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    g = torch.randn(out.shape)
    out.backward(g)
    ref.backward(g)
    for u, v in zip(a, b, strict=True):
        torch.testing.assert_close(u.grad, v.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("m,h", [(4, 1000), (3, 40), (1, 7)])
def test_post_and_expand_ragged(m, h):
    """Widths that leave a vector tail, other stream counts, and caller-given outputs (also a strided one)."""
    x, res = torch.randn(1, 9, h).bfloat16(), torch.randn(1, 9, m, h).bfloat16()
    post, comb = torch.rand(1, 9, m, 1), torch.rand(1, 9, m, m)
    want = mhc_post_ref(x, res, post, comb)
    with torch.no_grad():
        torch.testing.assert_close(mhc_post(x, res, post, comb), want)
        buf = torch.empty(1, 9, m, 2 * h, dtype=torch.bfloat16)[..., :h]
        mhc_post(x, res, post, comb, out=buf)
        torch.testing.assert_close(buf, want)
        assert torch.equal(expand_to_mhc(x, m), expand_to_mhc_ref(x, m))
        out = torch.full((1, 9, m, h), float("nan"), dtype=torch.bfloat16)
        expand_to_mhc(x, m, out=out)
        assert torch.equal(out, expand_to_mhc_ref(x, m))


def test_head_compute_mix_many_tokens():
    x, scale, base = torch.randn(3, 257, M) * 4, torch.rand(1) + 0.5, torch.randn(M)
    with torch.no_grad():
        torch.testing.assert_close(mhc_head_compute_mix(x, scale, base, 1e-6),
                                   mhc_head_compute_mix_ref(x, scale, base, 1e-6), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n0,n1", [(0, 7), (1, 0)])
def test_empty_inputs(n0, n1):
    """No tokens: every op answers with its shapes (the fused forward and the post backward too)."""
    from tile_kernels.modeling.mhc.ops import mhc_post_bwd, mhc_pre_big_fuse

    empty = torch.empty(n0, n1, M, 256, dtype=torch.bfloat16)
    assert mhc_pre_apply_mix(empty, torch.empty(n0, n1, M, 1)).shape == (n0, n1, 256)
    assert expand_to_mhc(empty[..., 0, :].contiguous(), M).shape == empty.shape
    assert sinkhorn_normalize(torch.empty(n0, n1, M, M)).shape == (n0, n1, M, M)
    pre, post, comb = mhc_pre_split_mixes(torch.empty(n0, n1, M3), torch.rand(3), torch.rand(M3), M, 1.0, 1e-6)
    assert pre.shape == post.shape == (n0, n1, M, 1) and comb.shape == (n0, n1, M, M)
    assert mhc_post(empty[:, :, 0], empty, torch.empty(n0, n1, M, 1), torch.empty(n0, n1, M, M)).shape == empty.shape
    fn = torch.randn(M3, M * 256) * 1e-4
    fused = mhc_pre_big_fuse(empty, fn, torch.rand(3), torch.rand(M3), 1e-6, 1e-6, 1e-6, 2.0, 10)
    assert [t.shape for t in fused] == [(n0, n1, M, 1), (n0, n1, M, M), (n0, n1, 256)]
    grads = mhc_post_bwd(empty[:, :, 0], empty, torch.empty(n0, n1, M, 1), torch.empty(n0, n1, M, M), empty,
                         fuse_grad_acc=False)
    assert [g.shape for g in grads] == [(n0, n1, 256), (n0, n1, M, 256), (n0, n1, M, 1), (n0, n1, M, M)]


def test_post_backward_of_zero_width():
    """Hidden size 0: the width sums are 0, as the reference's."""
    from tile_kernels.modeling.mhc.ops import mhc_post_bwd, post

    flat = torch.empty(1, 2, M, 0, dtype=torch.bfloat16)
    post_mix, comb = torch.randn(1, 2, M, 1), torch.randn(1, 2, M, M)
    grads = mhc_post_bwd(flat[:, :, 0], flat, post_mix, comb, flat, fuse_grad_acc=False)
    for g, w in zip(grads, post._post_bwd_ref(flat[:, :, 0], flat, post_mix, comb, flat), strict=True):
        assert torch.equal(g, w)
