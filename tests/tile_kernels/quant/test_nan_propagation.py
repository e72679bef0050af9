"""per_block_cast keeps NaN and Inf as the reference does, in partial (ragged) blocks too: a NaN in a
block makes its |x| maximum, hence its scale, NaN (std::max and max_ps used to skip it). Hypothesis
plants NaN/+-Inf at random positions; host and reference must agree NaN for NaN, bit for bit elsewhere."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tile_kernels
from tile_kernels import torch as ref

SPECIALS = st.sampled_from([float("nan"), float("inf"), float("-inf")])


def _same(got: torch.Tensor, want: torch.Tensor, name: str):
    g, w = got.float(), want.float()
    assert torch.equal(g.isnan(), w.isnan()), f"{name}: NaN positions differ at {(g.isnan() != w.isnan()).nonzero()[:5].tolist()}"
    keep = ~w.isnan()
    assert torch.equal(g[keep], w[keep]), f"{name}: values differ"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(positions=st.lists(st.integers(0, 2 ** 31), min_size=1, max_size=4), data=st.data())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block,round_sf", [((128, 128), False), ((32, 32), True)])
def test_per_block_cast_specials(host, dtype, block, round_sf, positions, data):
    values = data.draw(st.lists(SPECIALS, min_size=len(positions), max_size=len(positions)))
    x = torch.randn(150, 192).to(dtype)  # 150 rows, 192 columns: partial blocks both ways
    flat = x.view(-1)
    for p, v in zip(positions, values, strict=True):
        flat[p % flat.numel()] = v
    q, sf = tile_kernels.quant.per_block_cast(x, "e4m3", block, round_sf=round_sf)
    q_ref, sf_ref = ref.cast(x, "e4m3", block, round_sf=round_sf)
    _same(sf, sf_ref, "sf")
    _same(q, q_ref, "q")


def test_nan_in_a_partial_block_gives_a_nan_scale(host):
    x = torch.randn(150, 192)
    x[140, 190] = float("nan")  # the bottom-right block is 22 x 64
    _, sf = tile_kernels.quant.per_block_cast(x, "e4m3", (128, 128))
    assert sf[1, 1].isnan() and not sf[:1].isnan().any() and not sf[1, 0].isnan()
