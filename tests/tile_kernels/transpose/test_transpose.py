import pytest
import tile_kernels
import torch
from tile_kernels.testing.numeric import assert_equal


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [64, 4032])
def test_transpose_strided_rows(backend, dtype, rows):
    wide = torch.randn(rows, 2 * 192).to(dtype)
    x = wide[:, :192]  # row stride 2N
    assert_equal(tile_kernels.transpose.transpose(x), x.T.contiguous())


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("batch", [8, 3])
def test_batched_transpose(backend, dtype, batch):
    x = torch.randn(batch, 128, 320).to(dtype)
    out = tile_kernels.transpose.batched_transpose(x)
    assert_equal(out, x.transpose(1, 2).contiguous())


def test_rejects_bad_layout():
    with pytest.raises(ValueError, match="x must be 3-D"):
        tile_kernels.transpose.batched_transpose(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="unit stride"):
        tile_kernels.transpose.transpose(torch.zeros(64, 64).T)
