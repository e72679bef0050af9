"""transpose and batched_transpose on every backend (the Ascend kernel on the twin included): bit-exact
against torch's transpose, NaN payloads, +-Inf and -0.0 included (a transpose moves bits), at strided rows,
tails in both tile dimensions and empty inputs. 8-byte elements take the reference on Ascend
(tests/tile_kernels/ascend/test_transpose.py)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tile_kernels
from tile_kernels.testing.numeric import assert_equal

from .._twin import twin_subset


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [64, pytest.param(4032, marks=pytest.mark.backends(
    "host", "reference", why="64 rows and test_special_values' tails cover the Ascend kernel"))])
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


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _special(shape, dtype) -> torch.Tensor:
    """Random values with NaN (two payloads), +-Inf and -0.0 at fixed places."""
    x = torch.randn(shape) * 4
    x.view(-1)[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    x = x.to(dtype)
    if dtype == torch.float32:
        x.view(-1).view(torch.int32)[-1] = 0x7FA00001  # a signalling-NaN payload must survive as bits
    return x


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(3, 37, 45), (2, 130, 260)])  # within one tile; several tiles with tails
def test_special_values_move_as_bits(backend, dtype, shape):
    x = _special(shape, dtype)
    out = tile_kernels.transpose.batched_transpose(x)
    assert out.shape == (shape[0], shape[2], shape[1]) and out.is_contiguous() and out.dtype == dtype
    assert torch.equal(_bits(out), _bits(x.transpose(1, 2).contiguous()))
    wide = _special((67, 2 * 96), dtype)
    x = wide[:, :96]  # row stride 2N
    assert torch.equal(_bits(tile_kernels.transpose.transpose(x)), _bits(x.T.contiguous()))
    assert backend != "ascend" or backend.served == ["batched_transpose"] * 2


@pytest.mark.parametrize("shape", [(0, 5, 7), (2, 0, 7), (2, 5, 0)])
def test_empty(backend, shape):
    out = tile_kernels.transpose.batched_transpose(torch.zeros(shape, dtype=torch.bfloat16))
    assert out.shape == (shape[0], shape[2], shape[1])
    assert backend != "ascend" or backend.served == ["batched_transpose"]


def test_rejects_bad_layout():
    with pytest.raises(ValueError, match="x: expected a 3-D tensor"):
        tile_kernels.transpose.batched_transpose(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="unit stride"):
        tile_kernels.transpose.transpose(torch.zeros(64, 64).T)
    with pytest.raises(TypeError, match=r"^x: expected an element size of 1, 2, 4 or 8 bytes, got 16 bytes "
                                        r"\(torch.complex128\)$"):
        tile_kernels.transpose.batched_transpose(torch.zeros(2, 2, 2, dtype=torch.complex128))


RAGGED = [(1, 1), (7, 13), (67, 130), (129, 64)]
RAGGED_DTYPES = [torch.uint8, torch.bfloat16, torch.int32, torch.float64]


@pytest.mark.parametrize("dtype,rows,cols", twin_subset(
    [(d, *s) for s in RAGGED for d in RAGGED_DTYPES], [(RAGGED_DTYPES[i % 3], *s) for i, s in enumerate(RAGGED)],
    why="the twin runs each shape once over its 1-, 2- and 4-byte elements (8-byte ones take the reference)"))
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
