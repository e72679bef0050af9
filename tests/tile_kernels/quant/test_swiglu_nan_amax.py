"""swiglu_forward_and_per_token_cast keeps a NaN in its block maximum as the reference (torch's amax) and
the Ascend kernel do: the whole block's scale is NaN, wherever the NaN sits in the block (the 16-lane
maximum and its reduction drop NaN unless it is selected explicitly)."""
import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.testing.numeric import assert_equal


@pytest.mark.parametrize("col", [0, 5, 17, 100, 127])   # first lane, inside a 16-lane chunk, the tail
@pytest.mark.parametrize("backend", ["host", "reference", "ascend"])
def test_nan_in_a_block_gives_a_nan_scale(monkeypatch, backend, col):
    monkeypatch.setenv("TK_BACKEND", backend)
    x = torch.randn(4, 512, dtype=torch.bfloat16)
    x[1, col] = float("nan")           # the gate half: y[1, col] is NaN
    q, sf = tile_kernels.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 128)
    q_ref, sf_ref = ref.cast(ref.swiglu_forward(x), "e4m3", (1, 128))
    assert bool(sf_ref[1, col // 128].isnan())
    assert_equal(sf, sf_ref)
    assert_equal(q.view(torch.uint8), q_ref.view(torch.uint8))
