"""The mHC ops through the public API on DEVICE (tests/testkit/npu.py: an Ascend 950, or the twin with
NPU_TESTS_ON_TWIN=1) against the references on CPU, at upstream's tolerances; every table call must be
served by an Ascend kernel. The twin runs the twin tests' shapes; an NPU adds DeepSeek's (4 streams,
hidden 7168)."""
import pytest
import torch

from tests.testkit.npu import DEVICE, ON_TWIN
from tile_kernels.mhc.norm_fn_kernel import tf32_operand
from tile_kernels.modeling.mhc import ops as mhc
from tile_kernels.modeling.mhc.ops import post
from tile_kernels.reference import mhc as ref

from .test_npu import served_by_ascend  # noqa: F401  (autouse: every table call must pick the Ascend kernel)

pytestmark = pytest.mark.npu
M, M3 = 4, 24
SHAPES = [(7, 256)] if ON_TWIN else [(7, 256), (128, 7168), (4096, 7168)]


def _close(got, want, **tol):
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **tol)


@pytest.mark.parametrize("t,h", SHAPES)
def test_mhc_pre_ops(t, h):
    residual = torch.randn(1, t, M, h).bfloat16()
    fn, scale, base = (torch.randn(M3, M * h) * 1e-4, torch.randn(3) * 0.1, torch.randn(M3) * 0.1)
    r, f, s, b = (x.to(DEVICE) for x in (residual, fn, scale, base))
    _close(mhc.expand_to_mhc(r[:, :, 0].contiguous(), M), ref.expand_to_mhc_ref(residual[:, :, 0].contiguous(), M))
    mixes = mhc.mhc_pre_norm_fn(r, f, None, 1e-6)
    _close(mixes, ref.mhc_pre_norm_fn_ref(residual, tf32_operand(fn), None, 1e-6), atol=1e-3, rtol=1e-3)
    pre, post_mix, comb = mhc.mhc_pre_split_mixes(mixes, s, b, M, 2.0, 1e-6)
    want = ref.mhc_pre_split_mixes_ref(mixes.cpu(), scale, base, M, 2.0, 1e-6)
    for g, w in zip((pre, post_mix, comb), want, strict=True):
        _close(g, w)
    _close(mhc.sinkhorn_normalize(comb), ref.sinkhorn_normalize_ref(comb.cpu()))
    _close(mhc.mhc_head_compute_mix(pre[..., 0], s[:1], b[:M], 1e-6),
           ref.mhc_head_compute_mix_ref(pre[..., 0].cpu(), scale[:1], base[:M], 1e-6))
    _close(mhc.mhc_pre_apply_mix(r, pre), ref.mhc_pre_apply_mix_ref(residual.float(), pre.cpu()))
    got = mhc.mhc_pre_big_fuse(r, f, s, b, 1e-6, 1e-6, 1e-6, 2.0, 10)
    ref_pre, ref_post, ref_comb = ref.mhc_pre_split_mixes_ref(
        ref.mhc_pre_norm_fn_ref(residual, tf32_operand(fn), None, 1e-6), scale, base, M, 2.0, 1e-6)
    want = (ref_post, ref.sinkhorn_normalize_ref(ref_comb, 10, 1e-6),
            ref.mhc_pre_apply_mix_ref(residual.float(), ref_pre))
    for g, w in zip(got, want, strict=True):
        _close(g, w, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("t,h", SHAPES)
def test_mhc_post_and_backward(t, h):
    x, residual = torch.randn(1, t, h).bfloat16(), torch.randn(1, t, M, h).bfloat16()
    post_mix, comb, d_o = torch.randn(1, t, M, 1), torch.randn(1, t, M, M), torch.randn(1, t, M, h).bfloat16()
    args = [a.to(DEVICE) for a in (x, residual, post_mix, comb)]
    _close(mhc.mhc_post_fwd(*args), ref.mhc_post_ref(x, residual, post_mix, comb))
    got = mhc.mhc_post_bwd(*args, d_o.to(DEVICE), fuse_grad_acc=False)
    want = post._post_bwd_ref(x, residual, post_mix, comb, d_o)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        _close(g, w, **(dict(atol=1e-4, rtol=1e-4) if i >= 2 else {}))
