"""swiglu_forward_and_per_token_cast on the Ascend twin (the SwiGLU prologue of the cast kernel), what only
the Ascend kernel has: its int16 packed UE8M0 scales (q and sf bit-exact against the reference SwiGLU and
cast, the scales in the Ascend packing; an FP32 input with routing weights and the clamp) and the clamp
with counts, which the table leaves to the reference. The op's contract (ragged rows, BF16/FP32 input,
weights, the clamp, every other scale form) runs on every backend in
tests/tile_kernels/quant/test_swiglu_forward_and_per_token_cast.py."""
import pytest
import torch

import tile_kernels
from tile_kernels import _dispatch
from tile_kernels.reference import cast as ref_cast
from tile_kernels.reference import swiglu as ref
from tile_kernels.testing.numeric import assert_equal

from .conftest import ascend_packed_ue8m0
from .inputs import swiglu_forward_inputs

CASES = [  # dtype, H, npc, weighted, clamp, (col, round_sf, packed), sf_clamp_min
    (torch.float32, 384, 128, True, 0.5, (True, True, True), None),
]


@pytest.mark.parametrize("dtype,h,npc,weighted,clamp,layout,clamp_min", CASES)
def test_matches_reference(monkeypatch, dtype, h, npc, weighted, clamp, layout, clamp_min):
    monkeypatch.setenv("TK_BACKEND", "ascend")
    x, p2tt, w = swiglu_forward_inputs(dtype, h, weighted, seed=h + npc)
    col, round_sf, packed = layout
    args = (x, "e4m3", npc, p2tt, w, None, col, round_sf, packed, clamp, None, clamp_min)
    assert _dispatch.TABLE.serves("swiglu_forward_and_per_token_cast", x.device, x, npc, p2tt, w, None, col, round_sf,
                             packed, clamp, None, clamp_min) == "ascend"
    q, sf = tile_kernels.quant.swiglu_forward_and_per_token_cast(*args)
    y = ref.swiglu_forward(x, p2tt, w, clamp)
    q_ref, sf_ref = ref_cast.cast(y, "e4m3", (1, npc), round_sf=round_sf, use_tma_aligned_col_major_sf=col and not packed,
                                  clamp_min=clamp_min)
    assert_equal(q, q_ref)
    assert_equal(sf, ascend_packed_ue8m0(sf_ref) if packed else sf_ref)


def test_clamped_count_stays_on_the_reference(monkeypatch):
    x = torch.randn(4, 256)
    count = torch.zeros(3, dtype=torch.int64)
    assert _dispatch.TABLE.serves("swiglu_forward_and_per_token_cast", x.device, x, 128, None, None, None, False, False,
                             False, 1.0, count, None) != "ascend"
