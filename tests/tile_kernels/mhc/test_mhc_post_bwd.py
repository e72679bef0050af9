"""mhc_post_bwd: the host kernel against the reference (the torch backward) for BF16 and FP32 output
gradients, stream counts and widths that leave a vector tail, and empty inputs."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tile_kernels.modeling.mhc.ops import mhc_post_bwd


def _inputs(s, t, m, h, g_dtype):
    return (torch.randn(s, t, h).bfloat16(), torch.randn(s, t, m, h).bfloat16(), torch.rand(s, t, m, 1),
            torch.rand(s, t, m, m), torch.randn(s, t, m, h).to(g_dtype))


def _both(monkeypatch, *args):
    out = {}
    for backend in ("host", "reference"):
        monkeypatch.setenv("TK_BACKEND", backend)
        out[backend] = mhc_post_bwd(*args, fuse_grad_acc=False)
    return out["host"], out["reference"]


@settings(max_examples=12, deadline=None)
@given(m=st.sampled_from([1, 3, 4]), h=st.integers(1, 300), t=st.integers(1, 5),
       g_dtype=st.sampled_from([torch.bfloat16, torch.float32]))
def test_host_matches_the_reference(m, h, t, g_dtype):
    with pytest.MonkeyPatch.context() as monkeypatch:
        got, want = _both(monkeypatch, *_inputs(1, t, m, h, g_dtype))
    torch.testing.assert_close(got[0], want[0])            # d_x, BF16
    torch.testing.assert_close(got[1], want[1])            # d_residual, BF16
    torch.testing.assert_close(got[2], want[2], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[3], want[3], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("shape", [(0, 3, 4, 16), (1, 2, 4, 0)])
def test_empty(monkeypatch, shape):
    got, want = _both(monkeypatch, *_inputs(*shape, torch.bfloat16))
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)


def test_hands_the_residual_gradient_over(monkeypatch):
    monkeypatch.setenv("TK_BACKEND", "host")
    args = _inputs(1, 3, 4, 64, torch.bfloat16)
    d_residual = mhc_post_bwd(*args)[1]
    assert args[1].untyped_storage().grad_from_mhc_post is d_residual
