"""permute_rows on the Ascend vector kernel (deep_gemm/ascend/permute_rows.*, on deepjit's twin with
DG_BACKEND=ascend): transform_weights_for_mega_moe's gate/up interleave and UTCCP row orders match the
reference bit-exactly for BF16 weights and for FP8 weights with int32 scales (rows of 2, 1 and 4-byte
words: odd row bytes included), without a host read; permutation entries out of range are clamped."""
import torch

import deep_gemm
from deep_gemm import _dispatch
from tests.testkit.host_reads import guarding


def _transform(monkeypatch, backend, *args):
    with monkeypatch.context() as m:
        m.setenv("DG_BACKEND", backend)
        if backend == "ascend":
            with guarding(args):
                return deep_gemm.transform_weights_for_mega_moe(*args)
        return deep_gemm.transform_weights_for_mega_moe(*args)


def _serves(monkeypatch, t):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    return _dispatch.TABLE.serves("permute_rows", t.device, t, torch.arange(t.size(1)))


def _equal_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_bf16_interleave_matches_the_reference(monkeypatch):
    l1, l2 = torch.randn(3, 48, 37).bfloat16(), torch.randn(3, 37, 24).bfloat16()   # 74-byte rows: 2-byte words
    assert _serves(monkeypatch, l1) == "ascend"
    got_l1, got_l2 = _transform(monkeypatch, "ascend", l1, l2)
    want_l1, _ = _transform(monkeypatch, "reference", l1, l2)
    assert _equal_bits(got_l1, want_l1) and got_l2 is l2


def test_fp8_weights_and_scales_match_the_reference(monkeypatch):
    g, n, k = 2, 256, 37                                                  # 37-byte FP8 rows: 1-byte words
    w1 = torch.randint(-128, 127, (g, n, k), dtype=torch.int8).view(torch.float8_e4m3fn)
    sf1 = torch.randint(-2 ** 31, 2 ** 31 - 1, (g, n, 3), dtype=torch.int32)  # 12-byte rows: 4-byte words
    w2 = torch.randint(-128, 127, (g, 128, 16), dtype=torch.int8).view(torch.float8_e4m3fn)
    sf2 = torch.randint(-2 ** 31, 2 ** 31 - 1, (g, 128, 1), dtype=torch.int32)
    assert _serves(monkeypatch, w1) == "ascend" and _serves(monkeypatch, sf1) == "ascend"
    (got_w1, got_sf1), (got_w2, got_sf2) = _transform(monkeypatch, "ascend", (w1, sf1), (w2, sf2))
    (want_w1, want_sf1), (_, want_sf2) = _transform(monkeypatch, "reference", (w1, sf1), (w2, sf2))
    assert _equal_bits(got_w1, want_w1) and got_w2 is w2
    assert torch.equal(got_sf1, want_sf1) and torch.equal(got_sf2, want_sf2)


def test_out_of_range_entries_are_clamped(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    t = torch.randint(0, 1 << 30, (2, 5, 3), dtype=torch.int32)
    perm = torch.tensor([4, -7, 2, 99, 0])
    got = _dispatch.run("permute_rows", t.device, t, perm)
    assert torch.equal(got, t.index_select(1, perm.clamp(0, 4)))
