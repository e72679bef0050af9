import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tile_kernels
from tile_kernels.testing.numeric import assert_equal
from tile_kernels.torch.engram import engram_hash_ref, make_offsets


def test_reference_by_hand():
    ids = torch.tensor([[3, 5, 7]], dtype=torch.int32)
    mult = torch.tensor([[2, 3, 5]], dtype=torch.int64)
    vocab = torch.tensor([[[7, 11], [13, 17]]], dtype=torch.int32)
    offsets = make_offsets(vocab)
    assert offsets.tolist() == [[0, 7, 18, 31]]
    h1 = (3 * 2) ^ (5 * 3)  # 6 ^ 15 = 9
    h2 = h1 ^ (7 * 5)       # 9 ^ 35 = 42
    expect = [h1 % 7, h1 % 11 + 7, h2 % 13 + 18, h2 % 17 + 31]
    assert engram_hash_ref(ids, mult, vocab, offsets).tolist() == [[expect]]


@pytest.mark.parametrize("tokens", [1, 1000])
def test_engram_hash(backend, tokens):
    layers, n, m = 2, 3, 8
    ids = torch.randint(0, 100000, (tokens, n), dtype=torch.int32)
    mult = torch.randint(0, 100000, (layers, n), dtype=torch.int64)
    vocab = torch.randint(100000, 1000000, (layers, n - 1, m), dtype=torch.int32)
    offsets = make_offsets(vocab)
    out = tile_kernels.engram.engram_hash(ids, mult, vocab, offsets)
    assert_equal(out, engram_hash_ref(ids, mult, vocab, offsets))
    assert backend != "ascend" or backend.served == ["engram_hash"]


def test_wrapping_multiply_matches_reference(backend):
    ids = torch.tensor([[2**31 - 1, 2**31 - 2, 12345]], dtype=torch.int32)
    mult = torch.tensor([[2**62 + 11, 2**61 + 3, 2**60 + 7]], dtype=torch.int64)
    vocab = torch.tensor([[[999983], [1000003]]], dtype=torch.int32)
    offsets = make_offsets(vocab)
    assert_equal(tile_kernels.engram.engram_hash(ids, mult, vocab, offsets), engram_hash_ref(ids, mult, vocab, offsets))


def test_bad_shapes():
    ids = torch.zeros(4, 3, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^vocab_sizes: expected shape \(2, 2, M\), got \(2, 3, 8\)$"):
        tile_kernels.engram.engram_hash(ids, torch.ones(2, 3, dtype=torch.int64), torch.ones(2, 3, 8, dtype=torch.int32),
                                        torch.zeros(2, 16, dtype=torch.int32))
    with pytest.raises(TypeError, match="multipliers"):
        tile_kernels.engram.engram_hash(ids, torch.ones(2, 3, dtype=torch.int32), torch.ones(2, 2, 8, dtype=torch.int32),
                                        torch.zeros(2, 16, dtype=torch.int32))


@settings(max_examples=30, deadline=None)
@given(layers=st.integers(1, 3), n=st.integers(2, 4), m=st.integers(1, 4), bad=st.sampled_from(["vocab", "offsets", "mult"]))
def test_mismatched_shapes_are_rejected(layers, n, m, bad):
    ids = torch.randint(0, 1000, (5, n), dtype=torch.int32)
    mult = torch.randint(0, 1000, (layers, n + (bad == "mult")), dtype=torch.int64)
    vocab = torch.randint(10, 100, (layers, n - 1 + (bad == "vocab"), m), dtype=torch.int32)
    offsets = torch.zeros(layers, (n - 1) * m + (bad == "offsets"), dtype=torch.int32)
    with pytest.raises(ValueError):
        tile_kernels.engram.engram_hash(ids, mult, vocab, offsets)
