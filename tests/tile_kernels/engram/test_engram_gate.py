"""Engram gate forward/backward against the autograd of the reference, the weight reduction, and
the modeling autograd function (including main_grad accumulation), on every backend (the Ascend kernels on
the twin included; their tile tails are in tests/tile_kernels/ascend/test_engram.py)."""
import pytest
import torch

import tile_kernels
from tile_kernels.modeling.engram import engram_gate
from tile_kernels.testing.numeric import calc_diff
from tile_kernels.torch.engram import engram_gate_ref

E = tile_kernels.engram
EPS, CLAMP = 1e-20, 1e-6


def _inputs(tokens=64, hc=4, hidden=256):
    x = torch.randn(tokens, hc, hidden).bfloat16()
    k = torch.randn(tokens, hc, hidden).bfloat16()
    v = torch.randn(tokens, hidden).bfloat16()
    wh = (torch.rand(hc, hidden) + 0.5).bfloat16()
    we = (torch.rand(hc, hidden) + 0.5).bfloat16()
    return x, k, v, wh, we


@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16),
                                    (torch.float32, torch.float32)])
@pytest.mark.parametrize("hc,hidden", [(4, 256), (3, 37), (0, 16)])
def test_fused_weight(monkeypatch, dtypes, hc, hidden):
    """The host kernel (vector body and scalar tail) bit for bit against the reference, non-contiguous input too."""
    wh = (torch.randn(hidden, hc) + 0.5).to(dtypes[0]).t()
    we = (torch.randn(hc, hidden) + 0.5).to(dtypes[1])
    assert tile_kernels._dispatch.TABLE.serves("fused_weight", "cpu", wh, we) == "host"
    out = E.fused_weight(wh, we)
    monkeypatch.setenv("TK_BACKEND", "reference")
    expected = E.fused_weight(wh, we)
    assert out.dtype == torch.float32 and torch.equal(out, expected)
    assert torch.equal(expected, wh.float() * we.float())


def test_forward(backend):
    x, k, v, wh, we = _inputs()
    outs = E.engram_gate_fwd(x, k, v, E.fused_weight(wh, we), EPS, CLAMP)
    refs = engram_gate_ref(x, k, v, wh, we, CLAMP, EPS, save_for_backward=True)
    for a, b in zip(outs, refs, strict=True):
        assert calc_diff(a.float(), b.float()) < 2e-10
    out_nosave = E.engram_gate_fwd(x, k, v, E.fused_weight(wh, we), EPS, CLAMP, save_for_backward=False)
    assert torch.equal(out_nosave[0], outs[0]) and out_nosave[1:] == (None, None, None, None)
    assert backend != "ascend" or backend.served == ["fused_weight", "engram_gate_fwd"] * 2


@pytest.mark.parametrize("num_sms", [1, 2])
def test_backward(backend, num_sms):
    x, k, v, wh, we = _inputs()
    g = torch.randn(x.shape).bfloat16()
    # as upstream: activations as BF16 leaves (their gradients land in BF16), weights as FP32 leaves
    leaves = [t.clone().requires_grad_() for t in (x, k, v)] + [t.float().requires_grad_() for t in (wh, we)]
    engram_gate_ref(*leaves, CLAMP, EPS).backward(g)
    _, dot, gate, rx, rk = engram_gate_ref(x, k, v, wh, we, CLAMP, EPS, save_for_backward=True)
    wf = E.fused_weight(wh, we)
    old = tile_kernels.get_num_sms()
    tile_kernels.set_num_sms(num_sms)
    try:
        gx, gk, gv, partial = E.engram_gate_bwd(g, x, k, v, wf, dot, gate, rx, rk, CLAMP)
    finally:
        tile_kernels.set_num_sms(old)
    assert partial.shape == (num_sms, 4, 256)
    for a, b in ((gx, leaves[0].grad), (gk, leaves[1].grad), (gv, leaves[2].grad),
                 (partial.sum(0) * we.float(), leaves[3].grad), (partial.sum(0) * wh.float(), leaves[4].grad)):
        assert calc_diff(a.float(), b.float()) < 1e-8
    assert backend != "ascend" or backend.served == ["fused_weight", "engram_gate_bwd"]


@pytest.mark.parametrize("we_dtype", [torch.bfloat16, torch.float32])
def test_grad_w_reduce(backend, we_dtype):
    _, _, _, wh, we = _inputs()
    we = we.to(we_dtype)
    partial = torch.randn(4, *wh.shape)
    gwh, gwe = torch.randn(wh.shape), torch.randn(wh.shape)
    exp_wh, exp_we = gwh + partial.sum(0) * we.float(), gwe + partial.sum(0) * wh.float()
    E.grad_w_reduce(partial, wh, we, gwh, gwe)
    assert calc_diff(gwh, exp_wh) < 1e-10 and calc_diff(gwe, exp_we) < 1e-10
    assert backend != "ascend" or backend.served == ["grad_w_reduce"]


def test_modeling_autograd_and_main_grad(backend):
    x, k, v, wh, we = _inputs(tokens=24)
    x3, k3, v3 = x.view(2, 12, 4, 256), k.view(2, 12, 4, 256), v.view(2, 12, 256)
    params = [t.clone().requires_grad_() for t in (x3, k3, v3, wh, we)]
    out = engram_gate(*params, CLAMP, EPS)
    assert out.shape == x3.shape
    g = torch.randn(out.shape).bfloat16()
    out.backward(g)
    refs = [t.float().requires_grad_() for t in (x3, k3, v3, wh, we)]
    engram_gate_ref(refs[0].view(-1, 4, 256), refs[1].view(-1, 4, 256), refs[2].view(-1, 256), refs[3], refs[4],
                    CLAMP, EPS).float().backward(g.float().view(-1, 4, 256))
    for p, r in zip(params, refs, strict=True):
        assert calc_diff(p.grad.float(), r.grad) < 1e-4
    wh2 = wh.clone().requires_grad_()
    wh2.main_grad = torch.zeros(wh.shape)
    engram_gate(x3, k3, v3, wh2, we.clone().requires_grad_(), CLAMP, EPS).backward(g)
    assert wh2.grad is None and calc_diff(wh2.main_grad, refs[3].grad) < 1e-4


def test_forward_strided_inputs(backend):
    x, k, v, wh, we = _inputs()
    k_wide = torch.cat([k, k], dim=-1)[..., :256]  # token and head strides of a wider tensor
    assert not k_wide.is_contiguous()
    outs = E.engram_gate_fwd(x, k_wide, v, E.fused_weight(wh, we), EPS, CLAMP)
    refs = engram_gate_ref(x, k, v, wh, we, CLAMP, EPS, save_for_backward=True)
    for a, b in zip(outs, refs, strict=True):
        assert calc_diff(a.float(), b.float()) < 2e-10


@pytest.mark.parametrize("blocks", [1, 2, 5])
@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16)])
def test_grad_w_reduce_host_is_reference(host, blocks, dtypes):
    """Bitwise the reference's rounded products on a ragged width when the block sum has one order
    (up to 2 blocks, this machine's get_num_sms()); torch orders longer sums its own way."""
    from tile_kernels.reference.engram import grad_w_reduce as grad_w_reduce_ref
    wh, we = torch.randn(3, 1001).to(dtypes[0]), torch.randn(3, 1001).to(dtypes[1])
    partial = torch.randn(blocks, 3, 1001)
    gwh, gwe = torch.randn(3, 1001), torch.randn(3, 1001)
    ref_wh, ref_we = gwh.clone(), gwe.clone()
    E.grad_w_reduce(partial, wh, we, gwh, gwe)
    grad_w_reduce_ref(partial, wh, we, ref_wh, ref_we)
    if blocks <= 2:
        assert torch.equal(gwh, ref_wh) and torch.equal(gwe, ref_we)
    else:
        torch.testing.assert_close(gwh, ref_wh, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(gwe, ref_we, rtol=1e-6, atol=1e-6)


def test_set_num_sms_refuses_bad_counts():
    n = tile_kernels.get_device_num_sms()
    with pytest.raises(TypeError, match="^num_sms: expected an int, got float$"):
        tile_kernels.set_num_sms(2.0)
    with pytest.raises(ValueError, match=rf"^num_sms: expected a value in \[1, {n}\] .*, got {n + 1}$"):
        tile_kernels.set_num_sms(n + 1)
