"""tile_kernels.ascend.lossless on the Ascend twin: the forms its table entry leaves to the reference (no
rows, FP32 column-major input scales, input blocks of 1 or 2 columns). The op's contract (tails, both
scale layouts, every output block, byte for byte) runs on every backend, the Ascend kernel asserted to
serve it, in tests/tile_kernels/quant/test_per_block_cast_lossless.py."""
import torch

import tile_kernels
from tile_kernels import _dispatch
from tile_kernels.ascend import lossless
from tile_kernels.quant.lossless import _lossless_ref
from tile_kernels.reference import cast as ref
from tile_kernels.testing.numeric import assert_equal


def _fp4(in_col: bool, rows=150, hidden=576):
    x = torch.randn(rows, hidden, generator=torch.Generator().manual_seed(3)) * torch.logspace(-3, 3, hidden)
    x[:, 64:96] = 0.0  # a zero input block: its scale is the floor's
    return ref.cast(x, "e2m1", (1, 32), round_sf=True, use_tma_aligned_col_major_sf=in_col, use_packed_ue8m0=in_col)


def test_forms_left_to_the_reference(monkeypatch):
    monkeypatch.setenv("TK_BACKEND", "ascend")
    q, sf = _fp4(False)
    assert _dispatch.TABLE.serves("per_block_cast_lossless", q.device, q, sf, (1, 32), (32, 32), False, False) == "ascend"
    col_fp32 = ref.cast(torch.randn(8, 64), "e2m1", (1, 32), use_tma_aligned_col_major_sf=True)
    assert _dispatch.TABLE.serves("per_block_cast_lossless", q.device, *col_fp32, (1, 32), (32, 32), False,
                                  False) == "reference"
    empty = (q[:0], sf[:0])
    assert _dispatch.TABLE.serves("per_block_cast_lossless", q.device, *empty, (1, 32), (32, 32), False,
                                  False) == "reference"


def test_narrow_input_blocks_go_to_the_reference(monkeypatch):
    """Input blocks of 1 or 2 columns make less than one 4-byte output word a block: the kernel would leave
    the output unwritten, so the table serves them from the reference (named in ``supports``)."""
    monkeypatch.setenv("TK_BACKEND", "ascend")
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(5)) * torch.logspace(-2, 2, 64)
    q, sf = ref.cast(x, "e2m1", (1, 2), round_sf=True)
    assert not lossless.accepts(q, sf, (1, 2), (1, 32), False, False)
    assert _dispatch.TABLE.serves("per_block_cast_lossless", q.device, q, sf, (1, 2), (1, 32), False,
                                  False) == "reference"
    data, out_sf = tile_kernels.quant.per_block_cast_lossless((q, sf), "e4m3", (1, 2), (1, 32))
    want_data, want_sf = _lossless_ref(q, sf, (1, 2), (1, 32), False, False)
    assert_equal(data.view(torch.uint8), want_data.view(torch.uint8))
    assert_equal(out_sf, want_sf)
