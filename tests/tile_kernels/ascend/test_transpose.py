"""The transposes on the Ascend twin (TK_BACKEND=ascend, CPU tensors): the element sizes
``batched_transpose``'s kernel (ascend/transpose.py) leaves to the reference, and the two ``*_and_transpose``
casts, whose one kernel (ascend/channel_cast.py) writes the E4M3 data transposed: bit-exact against the
reference (every NaN one pattern: a NaN's sign is no part of the cast's contract), NaN and +-Inf, empty
inputs and the kernel's tails; each call's backend is recorded from the table and asserted. The transposes'
public cases (NaN payloads as bits, tails, strided rows, empty inputs) run on every backend in
tests/tile_kernels/transpose/test_transpose.py."""
import pytest
import torch

import tile_kernels
from tile_kernels import _dispatch
from tile_kernels.ascend import channel_cast
from tile_kernels.reference import cast as ref_cast
from tile_kernels.reference import swiglu as ref_swiglu
from tile_kernels.testing.numeric import assert_equal

from .test_cast_nan import assert_same


@pytest.fixture
def served(monkeypatch):
    """TK_BACKEND=ascend; the ``(op, backend)`` of every table call the test makes."""
    monkeypatch.setenv("TK_BACKEND", "ascend")
    calls, select = [], _dispatch.TABLE.select

    def recording(name, device, *args, **kwargs):
        backend, fn = select(name, device, *args, **kwargs)
        calls.append((name, backend))
        return backend, fn

    monkeypatch.setattr(_dispatch.TABLE, "select", recording)
    return calls


def test_eight_byte_elements_take_the_reference(served):
    """The kernel moves 1-, 2- and 4-byte elements (its ``supports`` says so); FP64 is served by the reference."""
    x = torch.randn(2, 9, 11, dtype=torch.float64)
    assert_equal(tile_kernels.transpose.batched_transpose(x), x.transpose(1, 2).contiguous())
    assert served == [("batched_transpose", "reference")]
    assert "8-byte elements take the reference" in _dispatch.TABLE["batched_transpose"].ascend.supports


def _cast_input(rows, hidden, special=True):
    x = torch.randn(rows, hidden) * 3
    x[5] = 0.0  # an all-zero column block takes the amax floor
    if special:
        x[1, 5] = float("nan")   # first scale block of channel 5
        x[rows - 1, 7] = float("nan")  # the last scale block of channel 7
        x[40, 9] = float("inf")
        x[3, 11] = -float("inf")
    return x.bfloat16()


@pytest.mark.parametrize("rows,hidden,npt,round_sf", [(128, 64, 32, False), (384, 320, 128, False),
                                                      (256, 192, 32, True)])
def test_per_channel_cast_and_transpose(served, rows, hidden, npt, round_sf):
    x = _cast_input(rows, hidden)
    q, sf = tile_kernels.quant.per_channel_cast_and_transpose(x, "e4m3", npt, round_sf)
    q_ref, sf_ref = ref_cast.cast(x, "e4m3", (npt, 1), round_sf=round_sf)
    assert q.shape == (hidden, rows) and sf.shape == (rows // npt, hidden)
    assert_same(q, q_ref.T.contiguous())
    assert_same(sf, sf_ref)
    assert served == [("per_channel_cast_and_transpose", "ascend")]


@pytest.mark.parametrize("h,npt,round_sf,without_transpose,clamp", [
    (64, 32, False, False, None), (192, 128, False, True, 5.0), (128, 32, True, False, 5.0)])
def test_swiglu_forward_and_per_channel_cast_and_transpose(served, h, npt, round_sf, without_transpose, clamp):
    x = _cast_input(256, 2 * h)
    q, sf = tile_kernels.quant.swiglu_forward_and_per_channel_cast_and_transpose(
        x, "e4m3", npt, round_sf, without_transpose, clamp)
    y = ref_swiglu.swiglu_forward(x, swiglu_clamp_value=clamp).bfloat16()
    q_ref, sf_ref = ref_cast.cast(y, "e4m3", (npt, 1), round_sf=round_sf)
    assert_same(q, q_ref if without_transpose else q_ref.T.contiguous())
    assert_same(sf, sf_ref)
    assert served == [("swiglu_forward_and_per_channel_cast_and_transpose", "ascend")]


def test_empty_casts(served):
    x = torch.zeros(0, 128, dtype=torch.bfloat16)
    q, sf = tile_kernels.quant.per_channel_cast_and_transpose(x, "e4m3", 32)
    assert q.shape == (128, 0) and sf.shape == (0, 128)
    q, sf = tile_kernels.quant.swiglu_forward_and_per_channel_cast_and_transpose(x, "e4m3", 128)
    assert q.shape == (64, 0) and sf.shape == (0, 64)
    assert [b for _, b in served] == ["ascend", "ascend"]


@pytest.mark.parametrize("swiglu", [False, True])
def test_kernel_tails_past_the_public_shapes(swiglu):
    """Token and channel counts that are not multiples of the tile (160 = 128 + 32 rows, 100 = 64 + 36
    channels): shapes the public ops refuse, so the kernel is called directly."""
    x = _cast_input(160, 200 if swiglu else 100)
    q, sf = channel_cast.cast(x, 32, False, True, swiglu=swiglu)
    y = ref_swiglu.swiglu_forward(x).bfloat16() if swiglu else x
    q_ref, sf_ref = ref_cast.cast(y, "e4m3", (32, 1))
    assert_same(q, q_ref.T.contiguous())
    assert_same(sf, sf_ref)
