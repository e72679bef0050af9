"""mhc_pre_norm_fn and mhc_pre_big_fuse read ``fn`` rounded to TF32 as upstream does before its TF32
MMA (``tile_kernels.mhc.norm_fn_kernel.round_to_tf32``), on every CPU path."""
import struct

import pytest
import torch

from tile_kernels.mhc.norm_fn_kernel import round_to_tf32
from tile_kernels.modeling.mhc.ops import mhc_pre_big_fuse, mhc_pre_norm_fn, mhc_pre_split_mixes

pytestmark = pytest.mark.usefixtures("backend")

M, M3, H = 4, 24, 256


def _tf32(v: float) -> float:
    """Round-to-nearest, ties away from zero, to 10 mantissa bits, from the FP32 bit pattern."""
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    return struct.unpack("<f", struct.pack("<I", ((bits + 0x1000) & 0xFFFFE000) & 0xFFFFFFFF))[0]


def _tf32_tensor(x):
    return torch.tensor([_tf32(v) for v in x.flatten().tolist()]).view(x.shape)


def test_round_to_tf32_bits_as_upstream():
    x = torch.tensor([1.0, 1 + 2 ** -11, -(1 + 2 ** -11), 1 + 2 ** -12, 3.0e-3])
    bits = round_to_tf32(x).view(torch.int32)
    assert torch.equal(bits, x.view(torch.int32) + 0x1000)          # half a TF32 ulp added, low bits kept
    assert (bits & ~0x1FFF).view(torch.float32).tolist() == [_tf32(v) for v in x.tolist()]
    assert _tf32(1 + 2 ** -11) == 1 + 2 ** -10 and _tf32(1 + 2 ** -12) == 1.0


def _inputs():
    residual = torch.randn(1, 8, M, H).bfloat16()
    fn = torch.randn(M3, M * H) * 1e-2
    return residual, fn


def _norm_with(residual, fn):
    r = residual.flatten(-2).double()
    return ((r @ fn.double().T) * torch.rsqrt(r.square().mean(-1, keepdim=True) + 1e-6)).float()


def test_norm_fn_reads_fn_rounded_to_tf32():
    residual, fn = _inputs()
    with torch.no_grad():
        out = mhc_pre_norm_fn(residual, fn, None, 1e-6, fuse_grad_acc=False)
    rounded, plain = _norm_with(residual, _tf32_tensor(fn)), _norm_with(residual, fn)
    assert (out - rounded).abs().max() < 1e-5 * rounded.abs().max()
    assert (plain - rounded).abs().max() > 1e-4 * rounded.abs().max()   # the rounding is visible at this size


def test_pre_big_fuse_reads_fn_rounded_to_tf32():
    residual, fn = _inputs()
    scale, base = torch.tensor([0.8, 1.2, 0.5]), torch.randn(M3) * 0.1
    post, _, _ = mhc_pre_big_fuse(residual, fn, scale, base, 1e-6, 1e-6, 1e-6, 2.0, 10)
    _, want, _ = mhc_pre_split_mixes(_norm_with(residual, _tf32_tensor(fn)), scale, base, M, 2.0, 1e-6)
    torch.testing.assert_close(post.view(want.shape), want, atol=1e-6, rtol=1e-5)


def test_norm_fn_backward_reads_tf32_operands():
    """Upstream's backward rounds the projections' gradient to TF32 before its MMAs (with ``fn`` as the
    forward rounded it); the squared-sum term stays FP32."""
    residual, fn = _inputs()
    residual.requires_grad_(True)
    fn = fn.requires_grad_(True)
    g = torch.randn(1, 8, M3)
    mhc_pre_norm_fn(residual, fn, None, 1e-6, fuse_grad_acc=False).backward(g)
    r, fn_t = residual.detach().flatten(-2).double(), _tf32_tensor(fn.detach()).double()
    k = M * H
    sqrsum = r.square().sum(-1, keepdim=True)
    rs = torch.rsqrt(sqrsum / k + 1e-6)
    d_sqrsum = (g.double() * (r @ fn_t.T)).sum(-1, keepdim=True) * -0.5 * rs.pow(3) / k
    d_mul = g.double() * rs

    def grads(d):
        return ((d @ fn_t + 2 * r * d_sqrsum).view_as(residual).bfloat16().double(),
                d.reshape(-1, M3).T @ r.reshape(-1, k))

    (x_want, fn_want) = grads(_tf32_tensor(d_mul.float()).double())
    (_, fn_plain) = grads(d_mul)
    assert (fn.grad.double() - fn_want).abs().max() < 1e-5 * fn_want.abs().max()
    assert (fn_plain - fn_want).abs().max() > 1e-4 * fn_want.abs().max()   # the rounding is visible here
    torch.testing.assert_close(residual.grad.double(), x_want, atol=1e-2, rtol=1e-2)
