"""deep_ep.ascend.fp8_pack (the per-token FP8 cast fused into packing by destination) on the Ascend
twin, bit-exact against the reference cast (deep_ep/utils/math.py): FP32 and power-of-two scales,
blocks of zeros (the 1e-4 floor), large and tiny magnitudes, each row at every position it names."""
import pytest
import torch

from deep_ep.ascend import fp8_pack
from deep_ep.utils.math import per_token_cast_to_fp8


def _x(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 256, generator=g).bfloat16()
    x[1] = 0
    x[2, :128] *= 3e4
    x[3, 128:] *= 1e-6
    return x


@pytest.mark.parametrize("round_scale", [False, True])
def test_cast_matches_reference(round_scale):
    x = _x(1)
    q, s = fp8_pack.per_token_cast_to_fp8(x, round_scale)
    want_q, want_s = per_token_cast_to_fp8(x, use_ue8m0=round_scale)
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(s, want_s)


def test_pack_writes_each_row_at_its_positions():
    x = _x(2)
    pos = torch.tensor([[0, 7], [-1, 1], [2, -1], [-1, -1], [3, 4], [5, 6]], dtype=torch.int32)
    out = torch.zeros(9, 256, dtype=torch.float8_e4m3fn)
    scales = torch.full((9, 2), -1.0)
    fp8_pack.pack_fp8(x, pos, out, scales, False)
    want_q, want_s = per_token_cast_to_fp8(x)
    written = torch.zeros(9, dtype=torch.bool)
    for t in range(6):
        for p in pos[t].tolist():
            if p >= 0:
                written[p] = True
                assert torch.equal(out[p].view(torch.uint8), want_q[t].view(torch.uint8)) and torch.equal(scales[p], want_s[t])
    assert bool((out[~written].view(torch.uint8) == 0).all()) and bool((scales[~written] == -1).all())


def test_out_of_range_positions_write_nothing():
    """A position past ``out`` (peer metadata) is skipped: the rows after it stay as they were."""
    x = _x(3)[:2]
    q_store = torch.zeros(6, 256, dtype=torch.uint8)
    s_store = torch.full((6, 2), 5.0)
    pos = torch.tensor([[1, 4], [0, 1 << 20]], dtype=torch.int32)
    fp8_pack.pack_fp8(x, pos, q_store[:4].view(torch.float8_e4m3fn), s_store[:4], False)
    want_q, want_s = per_token_cast_to_fp8(x, use_ue8m0=False)
    assert torch.equal(q_store[[1, 0]], want_q.view(torch.uint8)) and torch.equal(s_store[[1, 0]], want_s)
    assert not q_store[2:].any() and bool((s_store[2:] == 5.0).all())
