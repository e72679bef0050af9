"""Value checks that read tensor contents run on CPU tensors only (no host read of a device tensor: graph
capture), so the Ascend kernels must stay in bounds for any value. Each Ascend entry of the table is called
directly (as it is on an NPU tensor, where the public checks are skipped) with out-of-range values; the twin
catches any out-of-bounds access, and the defined outputs are compared with the reference: out-of-range
gather entries and expansion slots act as -1 (zero rows), a vocab size <= 0 hashes to the offset alone
(the reference's result with that vocab size 1), routing ids outside [0, E) are skipped like -1 and a slot
past ``num_expanded_tokens`` gets -1, out-of-range routing-weight entries weigh 0 (and get no gradient),
and the router clamps fixed ids into [0, E) and replica counts into [1, replicas]. The public ops still
refuse those values on CPU tensors."""
import pytest
import torch

import tile_kernels
from tile_kernels import _dispatch
from tile_kernels.reference import cast as ref_cast
from tile_kernels.reference import engram as ref_engram
from tile_kernels.reference import moe as ref_moe
from tile_kernels.reference import swiglu as ref_swiglu
from tile_kernels.reference import topk as ref_topk
from tile_kernels.testing.numeric import assert_equal

from .conftest import ascend_packed_ue8m0
from .inputs import fused_positions, routed_idx, router_options, swiglu_backward_inputs, swiglu_forward_inputs


def _ascend(op):
    return _dispatch.TABLE[op].ascend.fn


def test_gather_skips_out_of_range_tokens(monkeypatch):
    # UB starts as 0xFF bytes: a row copied out without its gathered row in UB shows (TileLang's lowering
    # already drops the out-of-range GM read itself)
    monkeypatch.setenv("DJ_TWIN_POISON", "1")
    x = (torch.randn(40, 256, generator=torch.Generator().manual_seed(2)) * 3).bfloat16()
    pos = torch.randint(-1, 40, (144,), generator=torch.Generator().manual_seed(3)).int()
    bad = pos.clone()
    bad[[1, 17, 60, 143]] = torch.tensor([40, 1 << 30, -7, -(1 << 31)], dtype=torch.int32)
    q, sf = _ascend("per_channel_cast_fused")(x, 128, None, False, bad)
    as_minus_one = torch.where((bad >= 0) & (bad < 40), bad, -1)
    want_q, want_sf = ref_cast.per_channel_cast_fused(x, 128, None, False, as_minus_one)
    assert_equal(q.view(torch.uint8), want_q.view(torch.uint8))
    assert_equal(sf, want_sf)
    monkeypatch.setenv("TK_BACKEND", "ascend")
    with pytest.raises(ValueError, match=r"^pos_to_token: expected entries < num_tokens \(40\), got max 1073741824$"):
        tile_kernels.quant.per_channel_cast_fused(x, "e4m3", 128, pos_to_token=bad)


@pytest.mark.parametrize("col", [False, True])
def test_expand_skips_out_of_range_slots(monkeypatch, col):
    monkeypatch.setenv("DJ_TWIN_POISON", "1")
    tokens, k, num_rows = 37, 3, 126
    pos = fused_positions(tokens, k, num_rows, torch.Generator().manual_seed(1))
    pos[2, 0], pos[7, 2], pos[9, 1] = num_rows, 1 << 30, -5  # num_rows: inside col-major padding (ld 128)
    data = torch.randn(tokens, 96).to(torch.float8_e4m3fn)
    sf = torch.rand(tokens, 1)  # test_expand_to_fused_with_sf's shapes: shared lowerings
    p2e = torch.zeros(num_rows, dtype=torch.int32)
    out, out_sf = _ascend("expand_to_fused_with_sf")((data, sf), 128, pos, p2e, col)
    valid = torch.where((pos >= 0) & (pos < num_rows), pos, -1)
    want, want_sf = ref_moe.expand_to_fused_with_sf((data.view(torch.uint8), sf), 128, valid, p2e, col)
    assert_equal(out.view(torch.uint8), want)
    assert out_sf.stride() == want_sf.stride()
    storage = torch.as_strided(out_sf, (out_sf.shape[1], out_sf.stride(1)), (out_sf.stride(1), 1))
    want_storage = torch.as_strided(want_sf, (want_sf.shape[1], want_sf.stride(1)), (want_sf.stride(1), 1))
    assert torch.equal(storage.view(torch.int32), want_storage.view(torch.int32))  # padding zero too
    monkeypatch.setenv("TK_BACKEND", "ascend")
    with pytest.raises(ValueError, match=r"^token_topk_to_pos: expected entries -1 or in \[0, 126\), got values in "
                                         r"\[-5, 1073741824\]$"):
        tile_kernels.moe.expand_to_fused_with_sf((data, sf), 128, pos, p2e, use_tma_aligned_col_major_sf=col)


def test_hash_of_a_nonpositive_vocab_size_is_the_offset(monkeypatch):
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(-2**31, 2**31 - 1, (9, 3), dtype=torch.int32, generator=g)
    mult = torch.randint(-2**62, 2**62, (2, 3), dtype=torch.int64, generator=g)
    vocab = torch.randint(1, 2**31 - 1, (2, 2, 4), dtype=torch.int32, generator=g)
    offsets = ref_engram.make_offsets(vocab)
    vocab[0, 0, 1], vocab[1, 1, 3] = 0, -3
    got = _ascend("engram_hash")(ids, mult, vocab, offsets)
    assert_equal(got, ref_engram.engram_hash_ref(ids, mult, vocab.clamp(min=1), offsets))
    monkeypatch.setenv("TK_BACKEND", "ascend")
    with pytest.raises(ValueError, match="^vocab_sizes: expected positive entries, got min -3$"):
        tile_kernels.engram.engram_hash(ids, mult, vocab, offsets)


def _as_minus_one(t: torch.Tensor, hi: int) -> torch.Tensor:
    return torch.where((t >= 0) & (t < hi), t, -1)


def test_fused_mapping_skips_unknown_experts_and_overflow(monkeypatch):
    monkeypatch.setenv("DJ_TWIN_POISON", "1")
    idx = routed_idx(5, 2, 7)  # test_get_fused_mapping's (5, 2, 7, alignment 1, 64 rows) lowering
    idx[1, 0], idx[2, 1], idx[4, 0] = 7, 1 << 40, -9
    got = _ascend("get_fused_mapping")(idx, 7, 64, 1, False)
    want = ref_moe.get_fused_mapping(_as_minus_one(idx, 7), 7, 64, 1, False)
    for g, w in zip(got[:7], want[:7], strict=True):
        assert_equal(g, w)
    # too few expanded rows: the slots past them get -1 and nothing is written past the maps
    idx = routed_idx(5, 2, 7)
    got = _ascend("get_fused_mapping")(idx, 7, 4, 1, False)
    full = ref_moe.get_fused_mapping(idx, 7, 64, 1, False)
    assert_equal(got[3], _as_minus_one(full[3], 4))
    for g, w in zip(got[:3], full[:3], strict=True):
        assert_equal(g, w[:4])
    monkeypatch.setenv("TK_BACKEND", "ascend")
    with pytest.raises(ValueError, match=r"^num_expanded_tokens: expected 0 or at least the \d+ aligned positions the "
                                         r"routing needs, got 4$"):
        tile_kernels.moe.get_fused_mapping(idx, 7, 4, 1)


def test_reduce_skips_out_of_range_positions(monkeypatch):
    monkeypatch.setenv("DJ_TWIN_POISON", "1")
    tokens, k, hidden, num_rows = 37, 3, 96, 128  # test_reduce_fused's BF16 weighted lowering
    pos = fused_positions(tokens, k, num_rows)
    pos[1, 2], pos[8, 0] = num_rows, 1 << 30
    x, w = torch.randn(num_rows, hidden).bfloat16(), torch.rand(tokens, k)
    assert_equal(_ascend("reduce_fused")(x, None, w, pos, "", None, None),
                 ref_moe.reduce_fused(x, w, _as_minus_one(pos, num_rows)))
    monkeypatch.setenv("TK_BACKEND", "ascend")
    with pytest.raises(ValueError, match=r"^token_topk_to_pos: expected entries -1 or in \[0, 128\)"):  # hidden 256k
        tile_kernels.moe.reduce_fused(torch.zeros(num_rows, 256, dtype=torch.bfloat16), w, pos)


def test_swiglu_weights_out_of_range_as_minus_one(monkeypatch):
    monkeypatch.setenv("DJ_TWIN_POISON", "1")
    x, p2tt, w = swiglu_forward_inputs(torch.float32, 384, True, seed=384 + 128)  # test_swiglu_forward_cast.py's case
    p2tt[3], p2tt[9] = w.numel(), 1 << 30
    q, sf = _ascend("swiglu_forward_and_per_token_cast")(x, 128, p2tt, w, None, True, True, True, 0.5, None, None)
    y = ref_swiglu.swiglu_forward(x, _as_minus_one(p2tt, w.numel()), w, 0.5)
    want_q, want_sf = ref_cast.cast(y, "e4m3", (1, 128), round_sf=True)
    assert_equal(q, want_q)
    assert_equal(sf, ascend_packed_ue8m0(want_sf))
    monkeypatch.setenv("TK_BACKEND", "ascend")
    with pytest.raises(ValueError, match=r"^pos_to_token_topk: expected entries in \[-1, \d+\) .*, got values in "
                                         r"\[-?\d+, 1073741824\]$"):
        tile_kernels.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 128, p2tt, w, None, True, True, True, 0.5)


def test_swiglu_backward_writes_no_gradient_out_of_range(monkeypatch):
    monkeypatch.setenv("DJ_TWIN_POISON", "1")
    (q, sf), grad, w, p2tt, t2p = swiglu_backward_inputs(torch.bfloat16, 256, 128, seed=256 + 128)  # case 1
    p2tt[2], p2tt[7] = w.numel(), 1 << 30
    got = _ascend("swiglu_backward_and_per_token_cast")(q, sf, grad, w, p2tt, t2p, 128, True, None)
    valid = _as_minus_one(p2tt, w.numel())
    out_r, xg_r, wg_r = ref_swiglu.swiglu_backward((q, sf), grad, w, valid, t2p, 128, None)
    assert_equal(got[0], out_r.to(torch.bfloat16))
    assert_equal(got[2], xg_r.to(torch.bfloat16))
    torch.testing.assert_close(got[3], wg_r, atol=1e-4, rtol=1e-4)


def test_router_clamps_fixed_ids_and_replica_counts(monkeypatch):
    monkeypatch.setenv("DJ_TWIN_POISON", "1")
    # the last option case of tests/tile_kernels/moe/test_top2_sum_gate.py
    logits, bias, mask, fix, phys, count, unmapped = router_options(True, True, True, 2)
    fix[:4] = True
    unmapped[0, 1], unmapped[1, 0], unmapped[3, 2] = 32, 1 << 40, -6
    count[2], count[5] = 0, 9
    args = (logits, bias, 4, 2, 4, True, 1, 1.5, 1, 2, 1, 2, "sigmoid")
    got_un, want_un = unmapped.clone(), unmapped.clamp(0, 31)
    idx, wt = _ascend("top2_sum_gate")(*args, mask, fix, phys, count, got_un)
    idx_ref, w_ref = ref_topk.top2_sum_gate(*args, mask, fix, phys, count.clamp(1, 2), want_un)
    assert torch.equal(idx, idx_ref)
    assert torch.allclose(wt, w_ref)
    assert torch.equal(got_un, want_un)
    monkeypatch.setenv("TK_BACKEND", "ascend")
    with pytest.raises(ValueError, match=r"^logical_count: expected entries in \[1, 2\], got values in \[0, 9\]$"):
        tile_kernels.moe.top2_sum_gate(*args, mask=mask, fix_routing_mask=fix, to_physical_map=phys,
                                       logical_count=count, unmapped_topk_idx=unmapped)
