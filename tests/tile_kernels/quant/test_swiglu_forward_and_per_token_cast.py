"""SwiGLU forward fused with the per-token cast: exact against reference swiglu + cast, with
routing weights, clamping (and its counts), skipped rows, every scale layout, any thread count, BF16 and
FP32 input; on every backend (the Ascend twin runs each form once; its int16 packed scales are in
tests/tile_kernels/ascend/test_swiglu_forward_cast.py)."""
import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.testing import clear_unused_sf
from tile_kernels.testing.generator import generate_topk_idx
from tile_kernels.testing.numeric import assert_equal

from .._twin import twin_subset


def _routing(tokens: int, topk: int, experts: int):
    idx = generate_topk_idx({"num_send_tokens": tokens, "num_topk": topk, "num_experts": experts, "num_ep_ranks": 2})
    p2e, _, p2tt, t2p = tile_kernels.moe.get_fused_mapping(idx, experts, 0, 32)[:4]
    weights = torch.rand(idx.shape, dtype=torch.float32)
    return p2e, p2tt, t2p, weights


SCALE_FORMS = [(128, False, False, False), (128, True, True, True), ("H", False, False, False), ("H", False, True, False)]


# a clamp with counts is served by the reference on Ascend (the clamp without counts: the test below)
@pytest.mark.parametrize("clamp,npc,col,round_sf,packed,num_sms", twin_subset(
    [(c, *f, n) for n in (1, 2) for f in SCALE_FORMS for c in (None, 10.0, 0.5)],
    [(None, *f, 1 + i % 2) for i, f in enumerate(SCALE_FORMS)],
    why="the twin runs each scale form once, without clamp (its counts go to the reference)"))
def test_swiglu_forward(backend, clamp, npc, col, round_sf, packed, num_sms):
    hidden = 384
    npc = hidden if npc == "H" else npc
    p2e, p2tt, _, w = _routing(40, 4, 6)
    x = (torch.randn(p2e.shape[0], 2 * hidden) * 4).bfloat16()
    counts = torch.zeros(3, dtype=torch.int64) if clamp is not None else None
    old = tile_kernels.get_num_sms()
    tile_kernels.set_num_sms(num_sms)
    try:
        q, sf = tile_kernels.quant.swiglu_forward_and_per_token_cast(
            x, "e4m3", npc, p2tt, w, p2e, use_tma_aligned_col_major_sf=col, round_sf=round_sf, use_packed_ue8m0=packed,
            swiglu_clamp_value=clamp, clamped_count=counts)
    finally:
        tile_kernels.set_num_sms(old)
    ref_counts = torch.zeros(3, dtype=torch.int64) if clamp is not None else None
    y = ref.swiglu_forward(x, p2tt, w, clamp, ref_counts)
    q_ref, sf_ref = ref.cast(y, "e4m3", (1, npc), round_sf=round_sf, use_tma_aligned_col_major_sf=col,
                             use_packed_ue8m0=packed)
    keep = p2e >= 0  # rows of padding positions are unspecified
    assert_equal(q[keep], q_ref[keep])
    if packed:
        assert_equal(clear_unused_sf(sf, hidden, npc)[keep], clear_unused_sf(sf_ref, hidden, npc)[keep])
    else:
        assert_equal(sf[keep], sf_ref[keep])
    if clamp is not None:
        assert torch.equal(counts, ref_counts)
        assert int(counts.sum()) > 0


def test_without_routing_and_sf_clamp_min(backend):
    x = torch.randn(33, 512, dtype=torch.bfloat16) * 1e-4
    q, sf = tile_kernels.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 128, sf_clamp_min=1e-9)
    q_ref, sf_ref = ref.cast(ref.swiglu_forward(x), "e4m3", (1, 128), clamp_min=1e-9)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)
    assert float(sf.max()) < 1e-4 / 448  # the lowered clamp actually took effect
    assert backend != "ascend" or backend.served == ["swiglu_forward_and_per_token_cast"]


@pytest.mark.parametrize("dtype,hidden,npc,weighted,clamp,col,round_sf,sf_clamp_min", [
    (torch.bfloat16, 256, 256, True, 10.0, False, True, 1e-3),  # a clamp without counts, whole-row scales
    (torch.float32, 128, 128, False, None, True, False, None),  # FP32 input, column-major scales
])
def test_ragged_rows_fp32_input_and_clamp_without_counts(backend, dtype, hidden, npc, weighted, clamp, col, round_sf,
                                                         sf_clamp_min):
    """37 rows, one saturating (exp of -100: silu gives -0), padding rows -1 (weight 0)."""
    g = torch.Generator().manual_seed(hidden + npc)
    x = (torch.randn(37, 2 * hidden, generator=g) * 4).to(dtype)
    x[2, :hidden] = -100.0
    p2tt = w = None
    if weighted:
        p2tt = torch.randperm(52, generator=g)[:37].int()
        p2tt[[0, 5]] = -1
        w = torch.rand(13, 4, generator=g)
    q, sf = tile_kernels.quant.swiglu_forward_and_per_token_cast(
        x, "e4m3", npc, p2tt, w, use_tma_aligned_col_major_sf=col, round_sf=round_sf, swiglu_clamp_value=clamp,
        sf_clamp_min=sf_clamp_min)
    assert backend != "ascend" or backend.served == ["swiglu_forward_and_per_token_cast"]
    q_ref, sf_ref = ref.cast(ref.swiglu_forward(x, p2tt, w, clamp), "e4m3", (1, npc), round_sf=round_sf,
                             use_tma_aligned_col_major_sf=col, clamp_min=sf_clamp_min)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)
