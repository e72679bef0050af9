"""tile_kernels' twin checks: its Ascend kernels as ``make ascend-check`` cases (``ascend_check.SourceCase``,
``cases()``, found through the package's ``deepjit.ascend_checks`` entry point): each runs one kernel's entry
point on CPU tensors (so on the twin), runs the reference
on the same inputs and returns the differences. Bit-exact (every NaN one pattern, as the twin tests compare)
except where upstream's tests use a tolerance (the routers' weights, the weight gradient).

Each kernel runs at a test shape (tails in rows and columns) and at DeepSeek-V3/V4 shapes: hidden 7168,
256 experts top-8 (8 groups, top-4), 4096 tokens prefill and 128 decode; the MoE expert side at 4096
positions of 2 x 2048 (the expert intermediate size). expand/reduce at prefill move 32768 expanded rows.
"""
from __future__ import annotations

import torch

from ._case_kit import DECODE, EXPERTS, GROUPS, HIDDEN, INTER, TOKENS, TOPK, TOPK_GROUPS, _compare

# ---- inputs -------------------------------------------------------------------------------------------

def _x(rows, hidden, dtype=torch.bfloat16, special=True):
    x = torch.randn(rows, hidden) * 3
    x[1 % rows] = 0.0
    if special and rows > 4:
        x[2, 5], x[3, -1], x[4, 7] = float("nan"), float("inf"), -float("inf")
    return x.to(dtype)


def _routed_idx(tokens, k, experts):
    return torch.stack([torch.randperm(experts)[:k] for _ in range(tokens)]).to(torch.int64)


def _positions(tokens, k, num_rows):
    pos = torch.randperm(num_rows)[:tokens * k].view(tokens, k).int()
    pos[0, 1 % k] = -1
    return pos


def _swiglu_bwd_inputs(rows, h, npc, g_dtype=torch.bfloat16, k=TOPK):
    from ..reference import cast as ref_cast
    tokens = -(-rows // k) + 1
    q, sf = ref_cast.cast(torch.randn(rows, 2 * h) * 2, "e4m3", (1, npc))
    grad = torch.randn(rows, h).to(g_dtype)
    w = torch.rand(tokens, k)
    p2tt = torch.randperm(tokens * k)[:rows].int()
    p2tt[0] = -1
    t2p = torch.full((tokens, k), -1, dtype=torch.int32)
    t2p.view(-1)[p2tt[p2tt >= 0].long()] = (p2tt >= 0).nonzero().flatten().int()
    return q, sf, grad, w, p2tt, t2p, npc, True, None


# ---- the cases ------------------------------------------------------------------------------------------

def _casts(shapes):
    from ..reference import cast as ref
    from . import block_cast, cast_back

    def per_token(fmt, npc, dtype=torch.bfloat16, col=False, round_sf=False):
        return _compare(lambda x: block_cast.per_token_cast(x, fmt, npc, use_tma_aligned_col_major_sf=col,
                                                            round_sf=round_sf),
                        lambda x: ref.cast(x, fmt, (1, npc), round_sf=round_sf, use_tma_aligned_col_major_sf=col),
                        lambda: (_x(*shapes, dtype),))

    def back(fmt, npc, out):
        def inputs():
            q, sf = ref.cast(_x(*shapes, torch.float32, special=False), fmt, (1, npc))
            return ((q, sf),)
        return _compare(lambda x: cast_back.cast_back(x, out, (1, npc)), lambda x: ref.cast_back(x, out, (1, npc)),
                        inputs)

    precomputed = _compare(
        lambda x, sf: block_cast.per_token_cast(x, "e4m3", 128, sf=sf),
        lambda x, sf: ref.cast(x, "e4m3", (1, 128), sf=sf),
        lambda: (_x(*shapes, torch.float32), torch.rand(shapes[0], -(-shapes[1] // 128)) + 0.01))
    return [
        ("per_token_cast_e4m3_bf16_npc128", per_token("e4m3", 128)),
        ("per_token_cast_e4m3_fp32_npc32_col_round_sf", per_token("e4m3", 32, torch.float32, True, True)),
        ("per_token_cast_e2m1_bf16_npc32", per_token("e2m1", 32)),
        ("per_token_cast_e4m3_precomputed_sf", precomputed),
        ("per_block_cast_e4m3_fp32_128x128", _compare(lambda x: block_cast.per_block_cast(x, "e4m3", (128, 128)),
                                                      lambda x: ref.cast(x, "e4m3", (128, 128)),
                                                      lambda: (_x(*shapes, torch.float32),))),
        ("per_channel_cast_e4m3_bf16_128", _compare(lambda x: block_cast.per_channel_cast(x, "e4m3", 128),
                                                    lambda x: ref.cast(x, "e4m3", (128, 1)),
                                                    lambda: (_x(-(-shapes[0] // 128) * 128, shapes[1]),))),
        ("cast_back_e4m3_npc128_bf16", back("e4m3", 128, "bf16")),
        ("cast_back_e2m1_npc32_fp32", back("e2m1", 32, "fp32")),
    ]


def _ascend_ue8m0(sf: torch.Tensor) -> torch.Tensor:
    """Reference FP32 power-of-two scales ``(Mb, Kb)`` in the Ascend int16 packed form: byte j of word i the
    biased exponent of block 2i + j (a missing last block 0), words stored column-major."""
    exps = ((sf.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
    exps = torch.nn.functional.pad(exps, (0, exps.shape[1] % 2)).contiguous()
    return exps.view(torch.int16).T.contiguous().T


def _packed_casts(shapes):
    """The packed-UE8M0 forms: the per-token cast writing them and the cast back reading them."""
    from ..reference import cast as ref
    from . import block_cast, cast_back

    def cast_ref(x):
        q, sf = ref.cast(x, "e4m3", (1, 32), round_sf=True)
        return q, _ascend_ue8m0(sf)

    def back_inputs():
        q, sf = ref.cast(_x(*shapes, torch.float32, special=False), "e4m3", (1, 32), round_sf=True)
        return q, sf

    return [
        ("per_token_cast_e4m3_bf16_npc32_ue8m0", _compare(
            lambda x: block_cast.per_token_cast(x, "e4m3", 32, use_tma_aligned_col_major_sf=True, round_sf=True,
                                                use_packed_ue8m0=True), cast_ref, lambda: (_x(*shapes),))),
        ("cast_back_e4m3_ue8m0_npc32_bf16", _compare(
            lambda q, sf: cast_back.cast_back((q, _ascend_ue8m0(sf)), "bf16", (1, 32)),
            lambda q, sf: ref.cast_back((q, sf), "bf16", (1, 32)), back_inputs)),
    ]


def _transposes(tokens, hidden):
    from ..quant import swiglu as sw
    from ..reference import cast as ref
    from ..reference import swiglu as ref_swiglu
    from . import channel_cast, transpose

    def cast_t(x):
        q, sf = ref.cast(x, "e4m3", (32, 1))
        return q.T.contiguous(), sf

    def swiglu_t(x):
        q, sf = ref.cast(ref_swiglu.swiglu_forward(x).bfloat16(), "e4m3", (128, 1))
        return q.T.contiguous(), sf

    return [
        ("batched_transpose_fp8", _compare(transpose.batched_transpose, lambda x: x.transpose(1, 2).contiguous(),
                                           lambda: (_x(tokens, hidden).to(torch.float8_e4m3fn).unsqueeze(0),))),
        ("batched_transpose_fp32_b2", _compare(transpose.batched_transpose, lambda x: x.transpose(1, 2).contiguous(),
                                               lambda: (_x(tokens, hidden // 2, torch.float32).view(2, -1, hidden // 2),))),
        ("per_channel_cast_and_transpose_npt32", _compare(lambda x: channel_cast.cast(x, 32, False, True), cast_t,
                                                          lambda: (_x(tokens, hidden),))),
        ("swiglu_fwd_per_channel_cast_and_transpose_npt128",
         _compare(lambda x: sw._fwd_channel_cast_ascend(x, 128, False, False, None), swiglu_t,
                  lambda: (_x(tokens, 2 * hidden),))),
    ]


def _channel_variants(tokens, hidden):
    """The per-channel forms left: SwiGLU with a clamp, cast per 32 tokens without the transpose."""
    from ..quant import swiglu as sw
    from . import channel_cast

    return [
        ("swiglu_fwd_per_channel_cast_npt32_clamped",
         _compare(lambda x: channel_cast.cast(x, 32, False, False, swiglu=True, clamp=10.0),
                  lambda x: sw._fwd_channel_cast_ref(x, 32, False, True, 10.0), lambda: (_x(tokens, 2 * hidden),))),
    ]


def _swiglu(rows, h):
    from ..quant import swiglu as sw
    from . import block_cast, swiglu_backward

    def fwd_inputs():
        x = _x(rows, 2 * h)
        tokens = -(-rows // TOPK) + 1
        p2tt = torch.randperm(tokens * TOPK)[:rows].int()
        p2tt[0] = -1
        return x, p2tt, torch.rand(tokens, TOPK)

    def fwd_ref(x, p2tt, w):
        return sw._fwd_cast_ref(x, 128, p2tt, w, None, False, False, False, 10.0, None, None)

    def bwd_ref(*args):
        return sw._bwd_cast_ref(*args)

    return [
        ("swiglu_fwd_per_token_cast_npc128_weighted_clamped",
         _compare(lambda x, p2tt, w: block_cast.swiglu_forward_and_per_token_cast(x, 128, p2tt, w,
                                                                                  swiglu_clamp_value=10.0),
                  fwd_ref, fwd_inputs)),
        ("swiglu_bwd_per_token_cast_npc128",
         _compare(swiglu_backward.swiglu_backward_and_per_token_cast, bwd_ref,
                  lambda: _swiglu_bwd_inputs(rows, h, 128), pick=lambda r: (r[0], r[1], r[2]))),
        ("swiglu_bwd_weight_grad_npc128",
         _compare(swiglu_backward.swiglu_backward_and_per_token_cast, bwd_ref,
                  lambda: _swiglu_bwd_inputs(rows, h, 128), atol=1e-4, pick=lambda r: r[3])),
    ]


def _routing(tokens, experts, k, hidden, groups=GROUPS, topk_groups=TOPK_GROUPS):
    from ..reference import moe as ref_moe
    from ..reference import topk as ref_topk
    from . import expand, fused_mapping, reduce, routing

    rows = tokens * k + 64  # expanded rows: every slot plus unused padding rows

    def gate_inputs():
        logits = torch.randn(tokens, experts)
        logits[0, :8] = 0.5  # ties
        return logits, torch.randn(experts) * 0.1, k, topk_groups, groups, False, 0, 2.5, 0, 1, 0, 1, "sigmoid"

    def weights():
        w = torch.rand(tokens, k)
        w[0] = 0.0
        return (w,)

    return [
        ("topk_gate", _compare(routing.topk_gate, lambda s, n: torch.topk(s, n, sorted=True).indices,
                               lambda: (torch.randn(tokens, experts), k))),
        ("top2_sum_gate_sigmoid_indices", _compare(routing.top2_sum_gate, ref_topk.top2_sum_gate, gate_inputs,
                                                   pick=lambda r: r[0])),
        ("top2_sum_gate_sigmoid_weights", _compare(routing.top2_sum_gate, ref_topk.top2_sum_gate, gate_inputs,
                                                   atol=1e-5, pick=lambda r: r[1])),
        ("normalize_weight", _compare(routing.normalize_weight, ref_moe.normalize_weight, weights)),
        ("get_fused_mapping_a128", _compare(fused_mapping.get_fused_mapping, ref_moe.get_fused_mapping,
                                            lambda: (_routed_idx(tokens, k, experts), experts, 0, 128, False))),
        ("expand_to_fused_bf16", _compare(expand.expand_to_fused,
                                          lambda x, pos, p2e: ref_moe.expand_to_fused(x.view(torch.int16), pos,
                                                                                      p2e).view(torch.bfloat16),
                                          lambda: (_x(tokens, hidden, special=False), _positions(tokens, k, rows),
                                                   torch.zeros(rows, dtype=torch.int32)))),
        ("reduce_fused_bf16_weighted", _compare(reduce.reduce_fused, ref_moe.reduce_fused,
                                                lambda: (_x(rows, hidden, special=False), torch.rand(tokens, k),
                                                         _positions(tokens, k, rows)))),
    ]


def _variants(tokens, experts, k, hidden, groups=GROUPS, topk_groups=TOPK_GROUPS):
    """The other forms kernel_specs.py lowers: the router with every option, the BF16 transpose, the scaled FP8
    reduce and the FP32-gradient backward with rounded scales."""
    from ..quant import swiglu as sw
    from ..reference import moe as ref_moe
    from ..reference import topk as ref_topk
    from . import reduce, routing, swiglu_backward, transpose

    rows = tokens * k + 64

    def options():  # every token masked in or out, a third fixed to given experts, 2 replicas an expert
        logits = torch.randn(tokens, experts)
        mask = torch.arange(tokens) % 5 != 1
        fix = torch.arange(tokens) % 3 == 0
        unmapped = torch.stack([torch.randperm(experts)[:k] for _ in range(tokens)])
        phys = torch.randperm((experts + 1) * 3).int().view(experts + 1, 3)
        count = torch.randint(1, 4, (experts + 1,), dtype=torch.int32)
        return (logits, torch.randn(experts) * 0.1, k, topk_groups, groups, True, 1, 2.5, 1, 4, 1, 2, "sigmoid", mask,
                fix, phys, count, unmapped)

    def gate(fn):
        def run(*args):
            idx, w = fn(*args)
            return idx, w, args[-1]  # unmapped_topk_idx, written in place
        return run

    def scaled():
        x = (torch.randn(rows, hidden) * 40).to(torch.float8_e4m3fn)
        return x, torch.rand(tokens, k), _positions(tokens, k, rows), torch.rand(rows) * 4, torch.tensor([0.37])

    return [
        ("top2_sum_gate_masked_fixed_mapped_indices",
         _compare(gate(routing.top2_sum_gate), gate(ref_topk.top2_sum_gate), options, pick=lambda r: (r[0], r[2]))),
        ("top2_sum_gate_masked_fixed_mapped_weights",
         _compare(gate(routing.top2_sum_gate), gate(ref_topk.top2_sum_gate), options, atol=1e-5, pick=lambda r: r[1])),
        ("batched_transpose_bf16", _compare(transpose.batched_transpose, lambda x: x.transpose(1, 2).contiguous(),
                                            lambda: (_x(tokens, hidden).unsqueeze(0),))),
        ("reduce_fused_e4m3_x_sf_sf", _compare(
            lambda x, w, pos, x_sf, sf: reduce.reduce_fused(x, w, pos, "e4m3", sf, None, x_sf),
            lambda x, w, pos, x_sf, sf: ref_moe.reduce_fused((x, x_sf), w, pos, "e4m3", sf), scaled)),
        ("swiglu_bwd_per_token_cast_fp32_npc32_round_sf",
         _compare(swiglu_backward.swiglu_backward_and_per_token_cast, sw._bwd_cast_ref,
                  lambda: _swiglu_bwd_inputs(tokens, -(-hidden // 64) * 32, 32, torch.float32)[:7] + (True, None),
                  pick=lambda r: (r[0], r[1], r[2]))),
    ]


def _routing_helpers(tokens, experts, k, groups=GROUPS, topk_groups=TOPK_GROUPS):
    """The routing helpers and the V4.1 router (routing_helpers.py, moe_topk_gate.py)."""
    from ..reference import moe as ref_moe
    from ..reference import moe_topk_gate as ref_gate
    from ..reference import topk as ref_topk
    from . import moe_topk_gate, routing_helpers

    def routed():
        idx = _routed_idx(tokens, k, experts)
        idx[0, 1 % k] = -1  # an unrouted slot
        return idx

    def group_ids():  # the group of each chosen expert: repeats to drop
        idx = routed()
        return torch.where(idx >= 0, idx // (experts // groups), idx), groups

    def unique(fn):
        def run(group_idx, num_groups):
            fn(group_idx, num_groups)
            return group_idx
        return run

    def group_scores():
        s = torch.randn(tokens, groups, experts // groups)
        s[0] = 1.0  # every group tied
        s[1 % tokens, 0, 0] = float("nan")
        return s, 2, topk_groups

    def gate(fn):
        def run(logits, bias):
            t = logits.shape[0]
            idx, w = torch.empty(t, k, dtype=torch.int64), torch.empty(t, k)
            fn(logits, k, 0, 2.5, 0, None, bias, None, None, None, None, None, None, None, idx, w, None)
            return idx, w
        return run

    def gate_inputs():
        return torch.randn(tokens, experts) * 3, torch.randn(experts) * 0.1

    return [
        ("group_count", _compare(routing_helpers.group_count, ref_moe.group_count, lambda: (routed(), experts))),
        ("aux_fi", _compare(routing_helpers.aux_fi, ref_moe.aux_fi, lambda: (routed(), experts, k))),
        ("mask_indices_by_tp_ep8_tp2", _compare(routing_helpers.mask_indices_by_tp, ref_moe.mask_indices_by_tp,
                                                lambda: (routed(), experts, 8, 1, 2))),
        ("inplace_unique_group_indices", _compare(unique(routing_helpers.inplace_unique_group_indices),
                                                  unique(ref_moe.inplace_unique_group_indices), group_ids)),
        ("topk_sum_and_topk_group_idx", _compare(routing_helpers.topk_sum_and_topk_group_idx,
                                                 ref_topk.topk_sum_and_topk_group_idx, group_scores)),
        # FP32 scores against the reference's FP64-rounded ones: weights within upstream's tolerance
        ("moe_topk_gate_forward_indices", _compare(gate(moe_topk_gate.moe_topk_gate_forward),
                                                   gate(ref_gate.moe_topk_gate_forward), gate_inputs,
                                                   pick=lambda r: r[0])),
        ("moe_topk_gate_forward_weights", _compare(gate(moe_topk_gate.moe_topk_gate_forward),
                                                   gate(ref_gate.moe_topk_gate_forward), gate_inputs, atol=1e-5,
                                                   pick=lambda r: r[1])),
    ]


def cases() -> list:
    from deepjit.tilelang_route.ascend_check import SourceCase

    runs = []
    for label, shapes in (("37x576", (37, 576)), (f"prefill_{TOKENS}x{HIDDEN}", (TOKENS, HIDDEN)),
                          (f"decode_{DECODE}x{HIDDEN}", (DECODE, HIDDEN))):
        runs += [(f"{name}_{label}", fn) for name, fn in _casts(shapes)]
        runs += [(f"{name}_{label}", fn) for name, fn in _packed_casts(shapes)]
    for label, (t, h) in (("256x192", (256, 192)), (f"prefill_{TOKENS}x{HIDDEN}", (TOKENS, HIDDEN)),
                          (f"decode_{DECODE}x{HIDDEN}", (DECODE, HIDDEN))):
        runs += [(f"{name}_{label}", fn) for name, fn in _transposes(t, h)]
        runs += [(f"{name}_{label}", fn) for name, fn in _channel_variants(t, h)]
    for label, (rows, h) in (("37x2x256", (37, 256)), (f"prefill_{TOKENS}x2x{INTER}", (TOKENS, INTER)),
                             (f"decode_{DECODE * TOPK}x2x{INTER}", (DECODE * TOPK, INTER))):
        runs += [(f"{name}_{label}", fn) for name, fn in _swiglu(rows, h)]
    for label, args in (("37t_64e_top6_h96", (37, 64, 6, 96, 8, 2)),
                        (f"prefill_{TOKENS}t_{EXPERTS}e_top{TOPK}_h{HIDDEN}", (TOKENS, EXPERTS, TOPK, HIDDEN)),
                        (f"decode_{DECODE}t_{EXPERTS}e_top{TOPK}_h{HIDDEN}", (DECODE, EXPERTS, TOPK, HIDDEN))):
        runs += [(f"{name}_{label}", fn) for name, fn in _routing(*args)]
        runs += [(f"{name}_{label}", fn) for name, fn in _routing_helpers(*args[:3], *args[4:])]
        runs += [(f"{name}_{label}", fn) for name, fn in _variants(*args)]
    from .mhc_cases import runs as mhc_runs
    runs += mhc_runs()
    from .check_cases_engram import cases as engram_cases
    runs += engram_cases()  # Engram, E5M6, expand_to_fused_with_sf, per_channel_cast_fused
    return [SourceCase(name, "vector", fn) for name, fn in runs]
