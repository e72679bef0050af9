"""mhc_pre_big_fuse and mhc_multilayer_recompute are bitwise equal to the ops they fuse; mhc_pre
and mhc_head train through the residual gradient hand-over like a plain autograd chain."""
import pytest
import torch

from tile_kernels.modeling.mhc import expand_from_embedding, mhc_head, mhc_pre
from tile_kernels.modeling.mhc.ops import (
    mhc_multilayer_recompute,
    mhc_post,
    mhc_pre_apply_mix,
    mhc_pre_big_fuse,
    mhc_pre_norm_fn,
    mhc_pre_split_mixes,
    sinkhorn_normalize,
)
from tile_kernels.torch import (
    mhc_post_ref,
    mhc_pre_apply_mix_ref,
    mhc_pre_norm_fn_ref,
    mhc_pre_split_mixes_ref,
    sinkhorn_normalize_ref,
)

# every test runs on every backend (the Ascend kernels on the twin included)
pytestmark = pytest.mark.usefixtures("backend")

M = 4
M3 = M * (M + 2)


def _params(hidden):
    fn = torch.randn(M3, M * hidden) * 1e-4
    scale = torch.tensor([0.8, 1.2, 0.5])
    base = torch.randn(M3) * 0.1
    return fn, scale, base


@pytest.mark.parametrize("n1,hidden", [pytest.param(512, 1280, marks=pytest.mark.backends(
    "host", "reference", why="512 tokens: (64, 2560) runs the same Ascend kernels on the twin")), (64, 2560)])
def test_pre_big_fuse_is_bitwise_the_composed_ops(n1, hidden):
    residual = torch.randn(1, n1, M, hidden).bfloat16()
    fn, scale, base = _params(hidden)
    post, comb, layer_input = mhc_pre_big_fuse(residual, fn, scale, base, 1e-6, 1e-6, 1e-6, 2.0, 10)
    with torch.no_grad():
        mixes = mhc_pre_norm_fn(residual, fn, None, 1e-6, fuse_grad_acc=False)
        pre_ref, post_ref, comb_ref = mhc_pre_split_mixes(mixes, scale, base, M, 2.0, 1e-6)
        comb_ref = sinkhorn_normalize(comb_ref, 10, 1e-6)
        li_ref = mhc_pre_apply_mix(residual, pre_ref)
    assert torch.equal(post, post_ref) and torch.equal(comb, comb_ref) and torch.equal(layer_input, li_ref)
    # and close to the plain references
    torch.testing.assert_close(layer_input, mhc_pre_apply_mix_ref(residual, mhc_pre_split_mixes_ref(
        mhc_pre_norm_fn_ref(residual, fn, None, 1e-6), scale, base, M, 2.0, 1e-6)[0]), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("layers,posts", [(1, 1)] + [pytest.param(*c, marks=pytest.mark.backends(
    "host", "reference", why="the layer loop is Python over the ops (1, 1) runs on the twin")) for c in ((3, 2), (3, 3))])
def test_multilayer_recompute_is_bitwise_the_loop(layers, posts):
    tokens, hidden = 64, 256
    r0 = torch.randn(1, tokens, M, hidden).bfloat16()
    pre = [torch.rand(1, tokens, M, 1) for _ in range(layers)]
    outs = [torch.randn(1, tokens, hidden).bfloat16() for _ in range(posts)]
    post = [torch.rand(1, tokens, M, 1) for _ in range(posts)]
    comb = [torch.rand(1, tokens, M, M) for _ in range(posts)]
    li = [torch.empty(1, tokens, hidden, dtype=torch.bfloat16) for _ in range(layers)]
    rs = [torch.empty(1, tokens, M, hidden, dtype=torch.bfloat16) for _ in range(posts)]
    mhc_multilayer_recompute(r0, pre, outs, post, comb, li, rs)
    r = r0
    for i in range(layers):
        assert torch.equal(li[i], mhc_pre_apply_mix(r, pre[i]))
        if i < posts:
            r = mhc_post(outs[i], r, post[i], comb[i])
            assert torch.equal(rs[i], r)


def test_layer_stack_trains_like_plain_autograd():
    """expand -> pre -> (layer) -> post -> head, with the hand-over, against the same chain built
    from the references with ordinary autograd."""
    tokens, hidden = 24, 256
    emb = torch.randn(1, tokens, hidden).bfloat16()
    fn, scale, base = _params(hidden)
    head_fn, head_scale, head_base = torch.randn(M, M * hidden) * 1e-4, torch.tensor([0.9]), torch.randn(M) * 0.1
    layer_w = torch.randn(hidden) * 0.5

    def run(use_ops):
        e = emb.clone().requires_grad_()
        f = fn.clone().requires_grad_()
        if use_ops:
            r = expand_from_embedding(e, M)
            x, (post, comb) = mhc_pre(r, f, scale, base, post_mult_value=2.0)
            r2 = mhc_post((x.float() * layer_w).bfloat16(), r, post, comb)
            out = mhc_head(r2, head_fn, head_scale, head_base)
        else:
            r = e.unsqueeze(-2).expand(1, tokens, M, hidden)
            mixes = mhc_pre_norm_fn_ref(r, f, None, 1e-6)
            pre, post, comb = mhc_pre_split_mixes_ref(mixes, scale, base, M, 2.0, 1e-6)
            comb = sinkhorn_normalize_ref(comb.view(-1, M, M)).view(1, tokens, M, M)
            x = mhc_pre_apply_mix_ref(r, pre)
            r2 = mhc_post_ref((x.float() * layer_w).bfloat16(), r, post, comb)
            head_mix = mhc_pre_norm_fn_ref(r2, torch.nn.functional.pad(head_fn, (0, 0, 0, M3 - M)), None, 1e-6)[..., :M]
            mix = torch.sigmoid(head_mix * head_scale + head_base) + 1e-6
            out = mhc_pre_apply_mix_ref(r2, mix.unsqueeze(-1))
        out.float().square().sum().backward()
        return out, e.grad, f.grad

    out_a, ge_a, gf_a = run(True)
    out_b, ge_b, gf_b = run(False)
    torch.testing.assert_close(out_a, out_b, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(ge_a.float(), ge_b.float(), atol=5e-2, rtol=5e-2)
    # The fused backward's products read TF32 operands, as upstream's MMAs; the plain chain is FP32. The
    # fn gradient sums many rows, so its TF32 error scales with its largest entries, not each one.
    torch.testing.assert_close(gf_a, gf_b, atol=1e-3 * float(gf_b.abs().max()), rtol=5e-2)


def test_mhc_pre_without_grad_takes_the_fused_path():
    residual = torch.randn(1, 32, M, 256).bfloat16()
    fn, scale, base = _params(256)
    with torch.no_grad():
        li, (post, comb) = mhc_pre(residual, fn, scale, base)
        post_f, comb_f, li_f = mhc_pre_big_fuse(residual, fn, scale, base, 1e-6, 1e-6, 1e-6, 1.0, 10)
    assert torch.equal(li, li_f) and torch.equal(post, post_f) and torch.equal(comb, comb_f)
