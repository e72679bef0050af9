import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tile_kernels
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
    with pytest.raises(ValueError, match="x: expected a 3-D tensor"):
        tile_kernels.transpose.batched_transpose(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="unit stride"):
        tile_kernels.transpose.transpose(torch.zeros(64, 64).T)
    with pytest.raises(TypeError, match=r"^x: expected an element size of 1, 2, 4 or 8 bytes, got 16 bytes "
                                        r"\(torch.complex128\)$"):
        tile_kernels.transpose.batched_transpose(torch.zeros(2, 2, 2, dtype=torch.complex128))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bfloat16, torch.int32, torch.float64])
@pytest.mark.parametrize("rows,cols", [(1, 1), (7, 13), (67, 130), (129, 64)])
def test_ragged_shapes(backend, dtype, rows, cols):
    x = torch.randint(0, 100, (2, rows, cols)).to(dtype)
    assert_equal(tile_kernels.transpose.batched_transpose(x), x.transpose(1, 2).contiguous())


@settings(max_examples=30, deadline=None)
@given(b=st.integers(1, 3), m=st.integers(1, 40), n=st.integers(1, 40), pad=st.integers(0, 5),
       dtype=st.sampled_from([torch.uint8, torch.bfloat16, torch.float32]))
def test_random_shapes_and_row_padding(b, m, n, pad, dtype):
    x = torch.randint(0, 50, (b, m, n + pad)).to(dtype)[:, :, :n]
    out = tile_kernels.transpose.batched_transpose(x)
    # torch keeps odd strides on size-1 dims; the op always returns a fresh contiguous tensor
    assert out.is_contiguous()
    assert_equal(out, x.transpose(1, 2).contiguous(), check_stride=False)
