"""The mHC kernels' ``make ascend-check`` cases (``runs``: each kernel on the twin against the reference,
through twin_checks.cases()), at the settings kernel_specs.py lowers them with (m = 4).

Shapes: a test shape with tails (37 tokens, hidden 300) and DeepSeek-V4's mHC: 4 streams of hidden 7168
(K = 28672 for the projection), 4096 tokens prefill and 128 decode. Tolerances are upstream's (its mHC
tests use torch's assert_close: BF16 outputs at 1.6e-2, the FP32 mixes at 1e-5, the backward's width
sums and the projection at 1e-4 here as atol = rtol)."""
from __future__ import annotations

import torch

from ._case_kit import DECODE, HIDDEN, TOKENS, _compare, differences
from .kernel_specs import M3, M

BF16, FP32, SUMS = 1.6e-2, 1e-5, 1e-4


def _specials(x: torch.Tensor) -> torch.Tensor:
    if x.numel() > 3:
        x.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=x.dtype)
    return x


def _family(t: int, h: int) -> list:
    from ..mhc.norm_fn_kernel import tf32_operand
    from ..modeling.mhc.ops import _forward, post
    from ..reference import mhc as ref
    from . import mhc_mix, mhc_post_bwd, mhc_pre_fuse, mhc_projection, mhc_sinkhorn, mhc_streams

    def residual():
        return _specials(torch.randn(1, t, M, h)).bfloat16()

    def post_inputs(g_dtype=None):
        g = () if g_dtype is None else (torch.randn(1, t, M, h).to(g_dtype),)
        return (torch.randn(1, t, h).bfloat16(), residual(), torch.randn(1, t, M, 1), torch.randn(1, t, M, M), *g)

    def exact_sums(*args):
        """The reference's width sums (d_post, d_comb) taken in float64: torch's FP32 einsum on an AMD Zen 4
        CPU strays up to 4e-4 from the exact sum over 7168 columns (measured at 4096 tokens, where 26 of
        the 65536 d_comb entries then miss upstream's 1e-4), while the kernel's compensated sum stays
        within 2e-5 of it; the tolerance is upstream's, the sum it is held to the exact one."""
        d = post._post_bwd_ref(*args, acc_dtype=torch.float64)
        return d[0], d[1], d[2].float(), d[3].float()

    def bwd(g_dtype):
        return [(f"{name}_{g_dtype}", _compare(mhc_post_bwd.post_bwd, reference,
                                               lambda: post_inputs(getattr(torch, g_dtype)), atol, pick))
                for name, reference, atol, pick in (
                    ("mhc_post_bwd_dx_dres", post._post_bwd_ref, BF16, lambda r: r[:2]),
                    ("mhc_post_bwd_dpost_dcomb", exact_sums, SUMS, lambda r: r[2:]))]

    def big_fuse() -> list[str]:
        """post and comb at 1e-4, the BF16 layer input at 1.6e-2, against the references composed."""
        torch.manual_seed(0)
        r, fn = residual()[0], torch.randn(M3, M * h) * 1e-4
        scale, base = torch.randn(3) * 0.1, torch.randn(M3) * 0.1
        post_mix, comb, layer_input = mhc_pre_fuse.pre_big_fuse(r, fn, scale, base, 1e-6, 1e-6, 1e-6, 2.0, 10)
        pre, ref_post, ref_comb = ref.mhc_pre_split_mixes_ref(
            ref.mhc_pre_norm_fn_ref(r, tf32_operand(fn), None, 1e-6).unsqueeze(0), scale, base, M, 2.0, 1e-6)
        return (differences("post_comb", (post_mix, comb), (ref_post[0], ref.sinkhorn_normalize_ref(ref_comb[0])),
                            SUMS)
                + differences("layer_input", layer_input, ref.mhc_pre_apply_mix_ref(r.float(), pre[0]), BF16))

    return [
        ("mhc_pre_big_fuse", big_fuse),
        ("mhc_expand_bf16", _compare(mhc_streams.expand, lambda x, m, out: ref.expand_to_mhc_ref(x, m),
                                     lambda: (torch.randn(1, t, h).bfloat16(), M, None))),
        ("mhc_head_compute_mix", _compare(mhc_mix.head_mix, ref.mhc_head_compute_mix_ref,
                                          lambda: (_specials(torch.randn(1, t, M)), torch.randn(1), torch.randn(M),
                                                   1e-6), FP32)),
        ("mhc_pre_split_mixes", _compare(mhc_mix.split_mixes, ref.mhc_pre_split_mixes_ref,
                                         lambda: (_specials(torch.randn(1, t, M3)), torch.randn(3), torch.randn(M3),
                                                  M, 2.0, 1e-6), FP32)),
        ("mhc_norm", _compare(mhc_mix.norm, _forward._norm_ref,
                              lambda: (_specials(torch.randn(1, t, M3)), torch.rand(1, t, 1) * M * h, M * h, 1e-6),
                              FP32)),
        ("mhc_projection", _compare(mhc_projection.projection, _forward._projection_ref,
                                    lambda: (residual(), tf32_operand(torch.randn(M3, M * h) * 1e-4)), SUMS)),
        ("mhc_sinkhorn", _compare(mhc_sinkhorn.sinkhorn, ref.sinkhorn_normalize_ref,
                                  lambda: (_specials(torch.randn(t, M, M)), 10, 1e-6), FP32)),
        ("mhc_pre_apply_mix", _compare(mhc_streams.apply_mix, lambda x, mix: ref.mhc_pre_apply_mix_ref(x.float(), mix),
                                       lambda: (residual()[0], torch.rand(t, M, 1)), BF16)),
        ("mhc_post_fwd", _compare(lambda *a: mhc_streams.post(*a, None), ref.mhc_post_ref, post_inputs, BF16)),
        *bwd("bfloat16"), *bwd("float32"),
    ]


def runs() -> list:
    """``(name, run)`` of every mHC case at the test, prefill and decode shapes."""
    out = []
    for label, (t, h) in (("37t_h300", (37, 300)), (f"prefill_{TOKENS}t_m{M}_h{HIDDEN}", (TOKENS, HIDDEN)),
                          (f"decode_{DECODE}t_m{M}_h{HIDDEN}", (DECODE, HIDDEN))):
        out += [(f"{name}_{label}", fn) for name, fn in _family(t, h)]
    return out
