"""deep_ep.ascend.reduce (the combine reduction) on the Ascend twin, bit-exact against an FP32 sum in
list order: from the biases (one or two, ``b0 + b1`` first), from 0, or from the first term (a
rank's partial), weighted (``w * row`` then the add, as upstream) or not, -1 positions skipped,
negative zeros kept as the order makes them, one rounding to BF16."""
import pytest
import torch

from deep_ep.ascend.reduce import combine_reduce

T, P, ROWS, H = 5, 3, 12, 40


def _expected(rows, pos, w, bias, from_first):
    out = []
    for t in range(T):
        if bias:
            acc = bias[0][t].float()
            if len(bias) > 1:
                acc = acc + bias[1][t].float()
        else:
            acc = None if from_first else torch.zeros(H)
        for j in range(P):
            if pos[t, j] >= 0:
                term = rows[int(pos[t, j])].float()
                term = term if w is None else w[t, j] * term
                acc = term if acc is None else acc + term
        out.append(torch.zeros(H) if acc is None else acc)
    return torch.stack(out).bfloat16()


@pytest.mark.parametrize("weighted, num_bias, from_first", [(False, 0, True), (True, 0, False), (False, 2, False),
                                                           (True, 1, False)])
def test_matches_an_ordered_fp32_sum(weighted, num_bias, from_first):
    g = torch.Generator().manual_seed(num_bias * 10 + weighted)
    rows = torch.randn(ROWS, H, generator=g).bfloat16()
    rows[0, :8] = -0.0
    pos = torch.randint(0, ROWS, (T, P), generator=g).int()
    pos[0] = torch.tensor([0, -1, -1])   # a lone negative zero: kept from the first term, +0 from 0
    pos[1] = -1                          # nothing received: the biases, or 0
    w = torch.rand(T, P, generator=g) if weighted else None
    bias = tuple(torch.randn(T, H, generator=g).bfloat16() for _ in range(num_bias))
    got = combine_reduce(rows, pos, w, bias, from_first)
    assert torch.equal(got.view(torch.int16), _expected(rows, pos, w, bias, from_first).view(torch.int16))


def test_out_of_range_positions_are_skipped():
    """A position past ``rows`` (peer metadata) is skipped like -1, never read (the twin fails a GM
    read out of bounds)."""
    g = torch.Generator().manual_seed(5)
    rows = torch.randn(ROWS, H, generator=g).bfloat16()
    pos = torch.randint(0, ROWS, (T, P), generator=g).int()
    w = torch.rand(T, P, generator=g)
    valid = pos.clone()
    pos[0, 1], pos[3, 0] = ROWS, 1 << 20
    valid[0, 1], valid[3, 0] = -1, -1
    assert torch.equal(combine_reduce(rows, pos, w), _expected(rows, valid, w, (), False))
