"""tile_kernels.ascend.expand.expand_to_fused_with_sf's entry point on the Ascend twin, what the public-op
cases in tests/tile_kernels/moe/test_fused_layout.py (every backend, the Ascend kernel asserted to serve
them) do not check: the whole column-major scale storage ``(sf_cols, align(P, 4))`` with its zero padding
(the main file compares the logical view) and a NaN scale copied as bits, data and scale rows bit-exact
against the reference with -1 slots and unmapped rows zero, and the kernel's launch with no rows."""
import pytest
import torch

from tile_kernels.ascend import expand
from tile_kernels.reference import moe as ref
from tile_kernels.testing.numeric import assert_equal

from .inputs import fused_positions


def _inputs(sf_dtype, tokens=37, k=3, hidden=96, num_rows=126):
    """One token/row shape for every case (and test_unvalidated_device_values'): the
    expansion's static lowerings (data rows, 4-byte scale rows) are shared."""
    pos = fused_positions(tokens, k, num_rows, torch.Generator().manual_seed(1))
    data = torch.randn(tokens, hidden).to(torch.float8_e4m3fn)
    if sf_dtype == torch.float32:
        sf = torch.rand(tokens, 1)  # hidden 96: one 128-channel scale
        sf[3, 0] = float("nan")
    else:
        sf = torch.randint(-2**31, 2**31 - 1, (tokens, 1), dtype=torch.int32)
    return (data, sf), pos, torch.zeros(num_rows, dtype=torch.int32)


def _storage(sf: torch.Tensor) -> torch.Tensor:
    """The whole column-major storage behind an (P, C) view of strides (1, ld): padding included."""
    return torch.as_strided(sf, (sf.shape[1], sf.stride(1)), (sf.stride(1), 1)).view(torch.int32)


@pytest.mark.parametrize("sf_dtype,col", [(torch.float32, False), (torch.float32, True), (torch.int32, True)])
def test_matches_reference(sf_dtype, col):
    x, pos, p2e = _inputs(sf_dtype)
    data, sf = expand.expand_to_fused_with_sf(x, 128, pos, p2e, col)
    want_data, want_sf = ref.expand_to_fused_with_sf((x[0].view(torch.uint8), x[1]), 128, pos, p2e, col)
    assert_equal(data.view(torch.uint8), want_data)
    assert sf.shape == want_sf.shape and sf.stride() == want_sf.stride() and sf.dtype == want_sf.dtype
    if col:
        assert torch.equal(_storage(sf), _storage(want_sf))
    else:
        assert torch.equal(sf.view(torch.int32), want_sf.view(torch.int32))


def test_no_rows():
    (data, sf), pos, _ = _inputs(torch.float32)
    none = torch.zeros(0, dtype=torch.int32)
    empty_pos = torch.full_like(pos, -1)
    got = expand.expand_to_fused_with_sf((data, sf), 128, empty_pos, none, True)
    assert got[0].shape == (0, 96) and got[1].shape == (0, 1)
