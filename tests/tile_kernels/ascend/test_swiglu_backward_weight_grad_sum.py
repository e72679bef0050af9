"""swiglu_backward_and_per_token_cast's weight_grad (a row's ``sum(g * act)`` over H columns) on the Ascend
twin, at H = 2048 (DeepSeek's expert intermediate size) on rows built to cancel: terms of size ~1-10,
running sums up to ~900, a total under 1e-2. A cancelling row (running sums ~100, total 0.034) failed
`make ascend-check`'s decode case (1024 x 2 x 2048) when the kernel summed each row serially in FP32:
~3e-4 off, outside upstream's atol = rtol = 1e-4, which the reference's torch sum and upstream's per-thread
partials joined by a tree meet; on these rows a serial sum is up to ~6x the tolerance off. Checked against an FP64
sum of the same FP32 terms and against the reference, with upstream's tolerance."""
import torch

from tile_kernels.ascend import swiglu_backward
from tile_kernels.reference import swiglu as ref
from tile_kernels.reference.cast import dequantize
from tile_kernels.reference.numerics import exp_f32

from .inputs import swiglu_backward_inputs

H, NPC, ROWS = 2048, 128, 9  # two row blocks of the kernel, the second ragged


def _fp32_terms(q, sf, grad):
    """The FP32 ``g * act`` both the kernel and the reference sum (``act`` in the reference's order)."""
    xf = dequantize(q, sf, (1, NPC))
    a, b = xf[:, :H], xf[:, H:]
    return grad.float() * (a / (1.0 + exp_f32(-a)) * b)


def _cancelling_inputs():
    """Random inputs; per row the gradients' signs set so the first half's terms all push the running sum one
    way and the second half's back (a peak ~900), then the BF16 gradient of the three largest-|act| columns
    zeroed and set, one after the other, to cancel what the row sums so far (each step leaves ~2^-9 of it)."""
    (q, sf), grad, w, p2tt, t2p = swiglu_backward_inputs(torch.bfloat16, H, NPC, seed=11, rows=ROWS, tokens=4, k=3)
    act = _fp32_terms(q, sf, torch.ones_like(grad))
    sign = torch.sign(act)
    sign[:, H // 2:] *= -1
    grad = (grad.float().abs() * sign).to(torch.bfloat16)
    for r in range(ROWS):
        cols = act[r].abs().argsort(descending=True)[:3].tolist()
        grad[r, cols] = 0.0
        for col in cols:
            rest = _fp32_terms(q, sf, grad)[r].double().sum()
            grad[r, col] = (-rest / act[r, col].double()).to(torch.bfloat16)
    return (q, sf), grad, w, p2tt, t2p


def test_weight_grad_of_cancelling_rows_within_upstream_tolerance():
    (q, sf), grad, w, p2tt, t2p = _cancelling_inputs()
    terms = _fp32_terms(q, sf, grad)
    valid = p2tt >= 0
    exact = torch.zeros(w.numel(), dtype=torch.float64)
    exact[p2tt[valid].long()] = terms.double().sum(1)[valid]
    # the inputs do what the test needs: every row cancels, from running sums far larger than the tolerance
    assert exact.abs().max() < 1e-2
    assert terms.cumsum(1).abs().amax(1)[valid].min() > 500
    got = swiglu_backward.swiglu_backward_and_per_token_cast(q, sf, grad, w, p2tt, t2p, NPC)[3]
    want = ref.swiglu_backward((q, sf), grad, w, p2tt, t2p, NPC)[2]
    torch.testing.assert_close(want.view(-1).double(), exact, atol=1e-4, rtol=1e-4)  # the oracle agrees
    torch.testing.assert_close(got.view(-1).double(), exact, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
