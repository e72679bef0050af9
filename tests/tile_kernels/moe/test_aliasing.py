"""Caller-given outputs of tile_kernels that overlap an input are refused before any write."""
import pytest
import torch

import tile_kernels
from tile_kernels.modeling.mhc.ops.expand import expand_to_mhc


def test_reduce_fused_out_aliasing_x(backend):
    x = torch.randn(8, 256).bfloat16()
    t2p = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7]], dtype=torch.int32)
    w = torch.rand(4, 2)
    before = x.clone()
    with pytest.raises(ValueError, match="out: expected memory disjoint from x, got out overlapping x"):
        tile_kernels.moe.reduce_fused(x, w, t2p, out=x[:4])
    assert torch.equal(x, before)
    out = torch.empty(4, 256, dtype=torch.bfloat16)
    assert tile_kernels.moe.reduce_fused(x, w, t2p, out=out) is out


def test_expand_to_mhc_out_aliasing_hidden(backend):
    storage = torch.zeros(4 * 2 * 64, dtype=torch.bfloat16)
    hidden = storage[:4 * 64].view(4, 64)
    with pytest.raises(ValueError, match="out: expected memory disjoint from hidden"):
        expand_to_mhc(hidden, 2, out=storage.view(4, 2, 64))


def test_grad_w_reduce_outputs_must_not_overlap_each_other(backend):
    partial = torch.randn(2, 2, 64)
    wh, we = torch.randn(2, 64), torch.randn(2, 64)
    g = torch.zeros(2, 64)
    with pytest.raises(ValueError, match="grad_weight_hidden: expected memory disjoint from grad_weight_embed"):
        tile_kernels.engram.grad_w_reduce(partial, wh, we, g, g)
