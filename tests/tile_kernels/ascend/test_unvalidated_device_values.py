"""Value checks that read tensor contents run on CPU tensors only (no host read of a device tensor: graph
capture), so the Ascend kernels must stay in bounds for any value. Each Ascend entry of the table is called
directly (as it is on an NPU tensor, where the public checks are skipped) with out-of-range values; the twin
catches any out-of-bounds access, and the defined outputs are compared with the reference: out-of-range
gather entries and expansion slots act as -1 (zero rows), a vocab size <= 0 hashes to the offset alone
(the reference's result with that vocab size 1). The public ops still refuse those values on CPU tensors."""
import pytest
import torch

import tile_kernels
from tile_kernels import _dispatch
from tile_kernels.reference import cast as ref_cast
from tile_kernels.reference import engram as ref_engram
from tile_kernels.reference import moe as ref_moe
from tile_kernels.testing.numeric import assert_equal

from .inputs import fused_positions


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
    with pytest.raises(ValueError, match="pos_to_token"):
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
    with pytest.raises(ValueError, match="token_topk_to_pos"):
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
    with pytest.raises(ValueError, match="vocab_sizes"):
        tile_kernels.engram.engram_hash(ids, mult, vocab, offsets)
