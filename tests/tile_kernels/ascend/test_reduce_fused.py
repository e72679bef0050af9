"""tile_kernels.ascend.reduce.reduce_fused on the Ascend twin, bit-exact against the reference (FP32 FMA
chain in k order, -1 slots skipped): E4M3 inputs with per-row x_sf, the output scale, E4M3 output
(saturating, NaN kept) and ``out=`` of E4M3 rows. The BF16/FP32 forms (weights, x_sf, E4M3 output,
``out=``) run on every backend in tests/tile_kernels/moe/test_fused_layout.py (test_reduce_fused)."""
import pytest
import torch

from tile_kernels.ascend import reduce
from tile_kernels.reference import moe as ref
from tile_kernels.testing.numeric import assert_equal

from .inputs import scaled_reduce_inputs


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
