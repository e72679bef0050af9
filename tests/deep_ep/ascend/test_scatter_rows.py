"""deep_ep.ascend.scatter (pack by destination rank, unpack into the expanded layout with zero ranges)
on the Ascend twin, bit-exact against a row-by-row scatter: BF16 and E4M3 rows, -1 positions, rows
no position names left as they were, zero ranges (empty ones included) applied after the rows."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deep_ep.ascend.scatter import scatter_rows

N, P, OUT, H = 9, 3, 32, 48


def _expected(x, pos, out, zero):
    want = out.clone()
    for i in range(pos.shape[0]):
        for j in range(pos.shape[1]):
            if pos[i, j] >= 0:
                want[int(pos[i, j])] = x[i]
    for begin, count in zero.tolist():
        want[begin:begin + count] = 0
    return want


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), fp8=st.booleans())
def test_matches_a_row_by_row_scatter(seed, fp8):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, H, generator=g).bfloat16()
    out = torch.randn(OUT, H, generator=g).bfloat16()
    if fp8:
        x, out = x.to(torch.float8_e4m3fn), out.to(torch.float8_e4m3fn)
    pos = torch.randperm(OUT, generator=g)[:N * P].view(N, P).int()
    pos[torch.rand(N, P, generator=g) < 0.3] = -1
    begin = torch.randint(0, OUT - 4, (2,), generator=g)
    zero = torch.stack([begin, torch.randint(0, 4, (2,), generator=g)], 1).int()
    want = _expected(x, pos, out, zero)
    scatter_rows(x, pos, out, zero)
    assert torch.equal(out.view(torch.uint8), want.view(torch.uint8))


def test_only_zero_ranges_without_rows():
    out = torch.ones(6, 16, dtype=torch.bfloat16)
    scatter_rows(torch.empty(0, 16, dtype=torch.bfloat16), torch.empty(0, 2, dtype=torch.int32), out,
                 torch.tensor([[1, 2], [5, 1]], dtype=torch.int32))
    assert out[:, 0].tolist() == [1, 0, 0, 1, 1, 0]


def test_out_of_range_positions_and_zero_ranges_write_nothing():
    """Positions come from peers' metadata: ones past ``out`` (and zero ranges reaching past it) are
    skipped, the rows after ``out`` in its storage untouched (the twin fails a GM write out of bounds)."""
    x = torch.arange(3 * 16, dtype=torch.float32).view(3, 16).bfloat16()
    storage = torch.full((8, 16), 7.0, dtype=torch.bfloat16)
    out = storage[:5]
    pos = torch.tensor([[4, 5], [0, -1], [1 << 20, 2]], dtype=torch.int32)
    scatter_rows(x, pos, out, torch.tensor([[3, 4]], dtype=torch.int32))
    want = torch.full((8, 16), 7.0, dtype=torch.bfloat16)
    want[0], want[2], want[3:5] = x[1], x[2], 0
    assert torch.equal(storage, want)


def test_one_kernel_serves_every_row_count():
    """The row and zero-range counts are symbolic: one lowering per row size and position count, its grid
    (64-row tiles here) following the rows of each launch, zero ranges dealt past the first block. (Cores
    zero their ranges without waiting for the others' rows: the ranges are padding no position names.)"""
    from deep_ep._lib import LIB
    from deep_ep.ascend import scatter
    from deepjit.tilelang_route.ascend_check import recorded_launches

    g = torch.Generator().manual_seed(5)
    with recorded_launches() as launches:
        for n, out_rows, num_zero in ((1, 8, 1), (70, 150, 0), (150, 320, 5)):
            x = torch.randn(n, 32, generator=g).bfloat16()
            out = torch.randn(out_rows, 32, generator=g).bfloat16()
            pos = torch.randperm(out_rows - 4 * num_zero, generator=g)[:n * 2].view(n, 2).int()
            begin = out_rows - 4 * torch.arange(1, num_zero + 1)
            zero = torch.stack([begin, torch.randint(0, 4, (num_zero,), generator=g)], 1).int()
            want = _expected(x, pos, out, zero)
            scatter_rows(x, pos, out, zero if num_zero else None)
            assert torch.equal(out.view(torch.uint8), want.view(torch.uint8)), n
    assert [blocks for blocks, _ in launches] == [1, 2, 3]
    assert [k[2] for k in LIB._kernels if k[:2] == ("tilelang", scatter.build) and k[2][0] == 64] == [(64, 2)]


def test_the_launch_checks_each_tensor_against_the_kernel():
    """deepjit checks rank, static extents, dtype and contiguity at every library launch (a smaller tensor would
    be an out-of-bounds access on an NPU), before the kernel runs; nothing is written."""
    from deep_ep._lib import LIB
    from deep_ep.ascend import scatter

    src, pos = torch.arange(6 * 8, dtype=torch.int32).view(6, 8), torch.zeros(6, 2, dtype=torch.int32)
    zeros, out = torch.zeros(0, 2, dtype=torch.int32), torch.full((6, 8), 7, dtype=torch.int32)
    for bad, match in [((src[:, :4].contiguous(), pos, zeros, out), r"tensor In: expected shape \('n', 8\)"),
                       ((src, pos.long(), zeros, out), "tensor Pos: expected dtype int32, got int64"),
                       ((src, pos, zeros, out.t().contiguous().t()), r"tensor Out: expected a contiguous tensor, got strides \(1, 6\)"),
                       ((src, pos, zeros), r": expected 4 tensors \(")]:
        with pytest.raises((ValueError, TypeError), match=match):
            LIB.run_tilelang(scatter.build, (32, 2), *bad)
    assert torch.all(out == 7)
