"""tile_kernels.ascend.reduce.reduce_fused on the Ascend twin: bit-exact against the reference (FP32 FMA
chain in k order, -1 slots skipped, cast to x's dtype), weighted BF16 and unweighted FP32, several cores; E4M3 inputs, per-row x_sf, the output scale, E4M3
output (saturating, NaN kept) and ``out=``."""
import pytest
import torch

from tile_kernels.ascend import reduce
from tile_kernels.reference import moe as ref
from tile_kernels.testing.numeric import assert_equal

from .inputs import fused_positions, scaled_reduce_inputs


@pytest.mark.parametrize("dtype,weighted", [(torch.bfloat16, True), (torch.float32, False)])
def test_matches_reference(dtype, weighted):
    tokens, k, hidden, num_rows = 37, 3, 96, 128
    pos = fused_positions(tokens, k, num_rows)
    x = torch.randn(num_rows, hidden).to(dtype)
    w = torch.rand(tokens, k) if weighted else None
    assert_equal(reduce.reduce_fused(x, w, pos), ref.reduce_fused(x, w, pos))


@pytest.mark.parametrize("dtype,weighted,x_scaled,out_scaled,fmt", [
    (torch.float8_e4m3fn, True, True, True, "e4m3"),   # the FP8 combine: E4M3 rows with per-row scales
    (torch.float8_e4m3fn, False, True, False, ""),
    (torch.bfloat16, True, False, True, "e4m3"),
    (torch.float32, True, True, False, ""),
])
def test_scaled_matches_reference(dtype, weighted, x_scaled, out_scaled, fmt):
    x, x_sf, w, pos, sf = scaled_reduce_inputs(dtype, weighted, x_scaled, out_scaled, fmt)
    got = reduce.reduce_fused(x, w, pos, fmt, sf, x_sf=x_sf)
    want = ref.reduce_fused((x, x_sf) if x_scaled else x, w, pos, fmt, sf)
    assert_equal(got.view(torch.uint8) if fmt else got, want.view(torch.uint8) if fmt else want, check_dtype=False)
    assert got.dtype == want.dtype


def test_public_op_writes_out(monkeypatch):
    import tile_kernels
    from tile_kernels import _dispatch

    monkeypatch.setenv("TK_BACKEND", "ascend")
    pos = torch.arange(12, dtype=torch.int32).view(6, 2)
    x, x_sf, sf = torch.randn(12, 256).to(torch.float8_e4m3fn), torch.rand(12), torch.tensor([0.5])
    out = torch.empty(6, 256, dtype=torch.float8_e4m3fn)
    assert _dispatch.TABLE.serves("reduce_fused", x.device, x, x_sf, None, pos, "e4m3", sf, out) == "ascend"
    res = tile_kernels.moe.reduce_fused((x, x_sf), None, pos, "e4m3", sf, out=out)
    assert res is out
    assert_equal(out.view(torch.uint8), ref.reduce_fused((x, x_sf), None, pos, "e4m3", sf).view(torch.uint8))
