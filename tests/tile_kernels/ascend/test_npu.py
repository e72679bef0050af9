"""tile_kernels' Ascend kernels on an Ascend 950 (npu-marked; skipped where torch_npu or an NPU is absent):
the public ops on NPU tensors, bit-exact with the reference on CPU as the twin tests are, at ragged sizes.
Covers per_token_cast / per_token_cast_back and topk_gate so far."""
import pytest
import torch

import tile_kernels
from tile_kernels.reference import cast as ref

pytestmark = pytest.mark.npu
NPU = "npu"


@pytest.mark.parametrize("rows", [37, 1000])
def test_per_token_cast_and_back(rows):
    x = torch.randn(rows, 256) * 3
    q, sf = tile_kernels.quant.per_token_cast(x.to(NPU), "e4m3", 128)
    q_ref, sf_ref = ref.cast(x, "e4m3", (1, 128))
    assert torch.equal(q.cpu().view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(sf.cpu(), sf_ref)
    back = tile_kernels.quant.per_token_cast_back((q, sf), "fp32", 128)
    assert torch.equal(back.cpu(), ref.cast_back((q_ref, sf_ref), "fp32", (1, 128)))


@pytest.mark.parametrize(("tokens", "experts", "k"), [(41, 64, 6), (4099, 256, 8)])
def test_topk_gate(tokens, experts, k):
    scores = torch.randn(tokens, experts)
    got = tile_kernels.moe.topk_gate(scores.to(NPU), k).cpu()
    assert torch.equal(got, torch.topk(scores, k, sorted=True).indices)
