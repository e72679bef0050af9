"""tile_kernels.ascend.reduce.reduce_fused on the Ascend twin: bit-exact against the reference (FP32 FMA
chain in k order, -1 slots skipped, cast to x's dtype), weighted BF16 and unweighted FP32, several cores; E4M3 inputs, per-row x_sf, the output scale, E4M3
output (saturating, NaN kept) and ``out=``."""
import pytest
import torch

from tile_kernels.ascend import reduce
from tile_kernels.reference import moe as ref
from tile_kernels.testing.numeric import assert_equal


@pytest.mark.parametrize("dtype,weighted", [(torch.bfloat16, True), (torch.float32, False)])
def test_matches_reference(dtype, weighted):
    tokens, k, hidden, num_rows = 37, 3, 96, 128
    pos = torch.randperm(num_rows)[:tokens * k].view(tokens, k).int()
    pos[0, 1] = -1
    pos[5] = -1  # a token with no slot reduces to zero
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
    g = torch.Generator().manual_seed(7)
    tokens, k, hidden, num_rows = 21, 4, 256, 96
    pos = torch.randperm(num_rows, generator=g)[:tokens * k].view(tokens, k).int()
    pos[3, 0] = -1
    x = (torch.randn(num_rows, hidden, generator=g) * 40).to(dtype)
    w = torch.rand(tokens, k, generator=g) if weighted else None
    x_sf = torch.rand(num_rows, generator=g) * 4 if x_scaled else None
    sf = torch.tensor([0.37]) if out_scaled else None
    if fmt:
        x[pos[1, 1]] = float("nan")  # a NaN row: token 1 stays NaN (torch's E4M3 cast keeps NaN)
        x[pos[2, 0], :8] = 1e4 if dtype != torch.float8_e4m3fn else 448.0  # saturates at +-448
    got = reduce.reduce_fused(x, w, pos, fmt, sf, x_sf=x_sf)
    want = ref.reduce_fused((x, x_sf) if x_scaled else x, w, pos, fmt, sf)
    assert_equal(got.view(torch.uint8) if fmt else got, want.view(torch.uint8) if fmt else want, check_dtype=False)
    assert got.dtype == want.dtype


def test_public_op_writes_out(monkeypatch):
    import tile_kernels
    from tile_kernels import _lib

    monkeypatch.setenv("TK_BACKEND", "ascend")
    pos = torch.arange(12, dtype=torch.int32).view(6, 2)
    x, x_sf, sf = torch.randn(12, 256).to(torch.float8_e4m3fn), torch.rand(12), torch.tensor([0.5])
    out = torch.empty(6, 256, dtype=torch.float8_e4m3fn)
    assert _lib.TABLE.serves("reduce_fused", x.device, x, x_sf, None, pos, "e4m3", sf, out) == "ascend"
    res = tile_kernels.moe.reduce_fused((x, x_sf), None, pos, "e4m3", sf, out=out)
    assert res is out
    assert_equal(out.view(torch.uint8), ref.reduce_fused((x, x_sf), None, pos, "e4m3", sf).view(torch.uint8))
