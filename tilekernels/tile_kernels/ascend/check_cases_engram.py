"""``make ascend-check`` cases of the Engram kernels (ascend/engram.py), the E5M6 casts (ascend/e5m6.py),
expand_to_fused_with_sf, per_channel_cast_fused and per_block_cast_lossless, at a test shape and at
DeepSeek shapes: 4096 tokens prefill and 128 decode, hidden 7168; Engram with hc = 4 streams and 2 hash
layers of 3-grams x 8 heads (kernel_specs.py's settings); the MoE side top-8 of 256 experts (scales per
128 channels).

Bit-exact where upstream's tests compare bits (fused_weight, the hash, the E5M6 casts, the expansion and the
per-channel cast: every NaN one pattern, as _case_kit.differences); the gate and the weight reduction within
upstream's calc_diff bounds (2e-10 forward, 1e-8 backward, 1e-10 reduction), non-finite entries equal.
"""
from __future__ import annotations

import torch

from ._case_kit import DECODE, HIDDEN, TOKENS, TOPK, calc_diff_differences, differences, gate_inputs
from .kernel_specs import CLAMP, EPS, HASH_HEADS, HASH_LAYERS, HC, NGRAM


def _engram(t, h, nb):
    from ..reference import engram as ref
    from . import engram

    def fused_weight():
        wh, we = torch.randn(HC, h).bfloat16(), torch.randn(HC, h).bfloat16()
        return differences("out", engram.fused_weight(wh, we), ref.fused_weight(wh, we))

    def grad_w_reduce():
        partial, wh, we = torch.randn(nb, HC, h), torch.randn(HC, h).bfloat16(), torch.randn(HC, h).bfloat16()
        got, want = [torch.randn(HC, h) for _ in range(2)], None
        want = [g.clone() for g in got]
        engram.grad_w_reduce(partial, wh, we, *got)
        ref.grad_w_reduce(partial, wh, we, *want)
        return [d for i in range(2) for d in calc_diff_differences(f"out[{i}]", got[i], want[i], 1e-10)]

    def gate_fwd():
        args = (*gate_inputs(t, HC, h, special=True), EPS, CLAMP, True)
        got, want = engram.engram_gate_fwd(*args), ref.engram_gate_fwd(*args)
        return [d for i in range(5) for d in calc_diff_differences(f"out[{i}]", got[i], want[i], 2e-10)]

    def gate_bwd():
        x, k, v, w = gate_inputs(t, HC, h, special=True)
        saved = ref.engram_gate_fwd(x, k, v, w, EPS, CLAMP)[1:]
        args = (torch.randn(t, HC, h).bfloat16(), x, k, v, w, *saved, CLAMP, nb)
        got, want = engram.engram_gate_bwd(*args), ref.engram_gate_bwd(*args)
        return [d for i in range(4) for d in calc_diff_differences(f"out[{i}]", got[i], want[i], 1e-8)]

    def hash_():
        ids = torch.randint(0, 2**31 - 1, (t, NGRAM), dtype=torch.int32)
        mult = torch.randint(-2**62, 2**62, (HASH_LAYERS, NGRAM), dtype=torch.int64)
        vocab = torch.randint(1, 2**20, (HASH_LAYERS, NGRAM - 1, HASH_HEADS), dtype=torch.int32)
        args = (ids, mult, vocab, ref.make_offsets(vocab))
        return differences("out", engram.engram_hash(*args), ref.engram_hash_ref(*args))

    return [("engram_fused_weight", fused_weight), ("engram_grad_w_reduce", grad_w_reduce),
            ("engram_gate_fwd", gate_fwd), ("engram_gate_bwd", gate_bwd), ("engram_hash", hash_)]


def _casts(t, h, k=TOPK):
    from ..quant.cast_ops import _cast_fused_ref
    from ..reference import cast as ref_cast
    from ..reference import cast_e5m6 as ref_e5m6
    from ..reference import moe as ref_moe
    from . import channel_cast_fused, e5m6, expand

    def x_in(dtype=torch.bfloat16):
        x = torch.randn(t, h) * 50
        x[1 % t, 3] = float("nan")
        return x.to(dtype)

    def e5m6_cast():
        x = x_in()
        return differences("out", e5m6.cast_to_e5m6(x, h, True, True, True), ref_e5m6.cast_to_e5m6(x, h, True, True, True))

    def e5m6_back():
        q, sf = ref_e5m6.cast_to_e5m6(x_in(), h, True, True, True)
        return differences("out", e5m6.cast_back_from_e5m6((q, sf), "bf16", (1, h)),
                           ref_e5m6.cast_back_from_e5m6((q, sf), "bf16", (1, h)))

    def expand_sf():
        rows = t * k + 64
        q, sf = ref_cast.cast(x_in(torch.float32), "e4m3", (1, 128))
        pos = torch.randperm(rows)[:t * k].view(t, k).int()
        pos[0, 0] = -1
        p2e = torch.zeros(rows, dtype=torch.int32)
        got = expand.expand_to_fused_with_sf((q, sf), 128, pos, p2e, True)
        want = ref_moe.expand_to_fused_with_sf((q.view(torch.uint8), sf), 128, pos, p2e, True)
        return differences("out", (got[0].view(torch.uint8), got[1]), want)

    def channel_fused():
        torch.manual_seed(0)   # seeded: its timeline (a flag hazard at 4096 x 7168 once) then repeats
        q, sf = ref_cast.cast(x_in(torch.float32), "e4m3", (1, 128))
        pos = torch.randint(-1, t, (-(-t // 16) * 16 + 16,)).int()
        args = ((q, sf), 128, 128, False, pos)
        return differences("out", channel_cast_fused.per_channel_cast_fused(*args), _cast_fused_ref(*args))

    def lossless_():
        from ..quant.lossless import _lossless_ref
        from . import lossless

        x = torch.randn(t, h) * torch.logspace(-3, 3, h)
        q, sf = ref_cast.cast(x, "e2m1", (1, 32), round_sf=True, use_tma_aligned_col_major_sf=True,
                              use_packed_ue8m0=True)
        args = (q, sf, (1, 32), (128, 128), True, True)
        return differences("out", lossless.per_block_cast_lossless(*args), _lossless_ref(*args))

    return [("per_block_cast_lossless_128x128_ue8m0", lossless_), ("cast_to_e5m6_bf16_ue8m0", e5m6_cast), ("cast_back_from_e5m6_bf16", e5m6_back),
            ("expand_to_fused_with_sf_e4m3_col", expand_sf), ("per_channel_cast_fused_e4m3_gather", channel_fused)]


def cases() -> list[tuple]:
    """(name, run) pairs; twin_checks.cases makes them SourceCases."""
    runs = []
    for label, (t, h, nb) in (("37x4x300", (37, 300, 5)), (f"prefill_{TOKENS}x{HC}x{HIDDEN}", (TOKENS, HIDDEN, 24)),
                              (f"decode_{DECODE}x{HC}x{HIDDEN}", (DECODE, HIDDEN, 24))):
        runs += [(f"{name}_{label}", fn) for name, fn in _engram(t, h, nb)]
    for label, (t, h) in (("37x576", (37, 576)), (f"prefill_{TOKENS}x{HIDDEN}", (TOKENS, HIDDEN)),
                          (f"decode_{DECODE}x{HIDDEN}", (DECODE, HIDDEN))):
        runs += [(f"{name}_{label}", fn) for name, fn in _casts(t, h)]
    return runs
