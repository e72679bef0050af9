"""permute_rows on the Ascend vector kernel (deep_gemm/ascend/permute_rows.*, on deepjit's twin with
DG_BACKEND=ascend): transform_weights_for_mega_moe's gate/up interleave and UTCCP row orders match the
reference bit-exactly for BF16 weights and for FP8 weights with int32 scales (rows of 2, 1 and 4-byte
words: odd row bytes included), without a host read, and DeepGEMM-Ascend's FP8 x FP4 layout (the Ascend path's
transform: its scale check reads the scales once, at load time); entries out of range are clamped."""
import contextlib

import torch

import deep_gemm
from deep_gemm import _dispatch, mega
from tests.testkit.host_reads import guarding


def _transform(monkeypatch, backend, *args, guard=False):
    with monkeypatch.context() as m:
        m.setenv("DG_BACKEND", backend)
        with guarding(args) if guard else contextlib.nullcontext():
            return deep_gemm.transform_weights_for_mega_moe(*args)


def _serves(monkeypatch, t):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    return _dispatch.TABLE.serves("permute_rows", t.device, t, torch.arange(t.size(1)))


def _equal_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_bf16_interleave_matches_the_reference(monkeypatch):
    l1, l2 = torch.randn(3, 48, 37).bfloat16(), torch.randn(3, 37, 24).bfloat16()   # 74-byte rows: 2-byte words
    assert _serves(monkeypatch, l1) == "ascend"
    got_l1, got_l2 = _transform(monkeypatch, "ascend", l1, l2, guard=True)
    want_l1, _ = _transform(monkeypatch, "reference", l1, l2)
    assert _equal_bits(got_l1, want_l1) and got_l2 is l2


def _upstream_form(monkeypatch, backend, w1, sf1, sf2):
    """Upstream's FP8 x FP4 transform steps (the Ascend path's transform gives DeepGEMM-Ascend's layout instead)."""
    with monkeypatch.context() as m:
        m.setenv("DG_BACKEND", backend)
        with guarding((w1, sf1, sf2)) if backend == "ascend" else contextlib.nullcontext():
            return mega._interleave(w1), mega._utccp(mega._interleave(sf1)), mega._utccp(sf2)


def test_fp8_weights_and_scales_match_the_reference(monkeypatch):
    g, n, k = 2, 256, 37                                                  # 37-byte FP8 rows: 1-byte words
    w1 = torch.randint(-128, 127, (g, n, k), dtype=torch.int8).view(torch.float8_e4m3fn)
    sf1 = torch.randint(-2 ** 31, 2 ** 31 - 1, (g, n, 3), dtype=torch.int32)  # 12-byte rows: 4-byte words
    sf2 = torch.randint(-2 ** 31, 2 ** 31 - 1, (g, 128, 1), dtype=torch.int32)
    assert _serves(monkeypatch, w1) == "ascend" and _serves(monkeypatch, sf1) == "ascend"
    got = _upstream_form(monkeypatch, "ascend", w1, sf1, sf2)
    want = _upstream_form(monkeypatch, "reference", w1, sf1, sf2)
    assert _equal_bits(got[0], want[0]) and torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])


def test_ascend_layout_transform_matches_the_reference(monkeypatch):
    """DeepGEMM-Ascend's layout (what the transform gives on the Ascend path): the 128-row gate / up interleave of
    weights and scales by the kernel, equal to the reference path's."""
    g, n, half_k = 2, 512, 64
    w1 = torch.randint(-128, 127, (g, n, half_k), dtype=torch.int8)
    sf1 = torch.randint(0, 249, (g, n, 4), dtype=torch.uint8).view(torch.int32)
    w2 = torch.randint(-128, 127, (g, 256, 128), dtype=torch.int8)
    sf2 = torch.randint(0, 249, (g, 256, 8), dtype=torch.uint8).view(torch.int32)
    got = _transform(monkeypatch, "ascend", (w1, sf1), (w2, sf2))
    assert got[0][0].shape == (g, 2, 256, half_k) and got[0][1].dtype == torch.int16
    want = (mega._to_ascend_layout(w1, sf1, True), mega._to_ascend_layout(w2, sf2, False))
    for (gw, gs), (ww, ws) in zip(got, want, strict=True):
        assert _equal_bits(gw, ww) and torch.equal(gs, ws)


def test_out_of_range_entries_are_clamped(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    t = torch.randint(0, 1 << 30, (2, 5, 3), dtype=torch.int32)
    perm = torch.tensor([4, -7, 2, 99, 0])
    got = _dispatch.run("permute_rows", t.device, t, perm)
    assert torch.equal(got, t.index_select(1, perm.clamp(0, 4)))
