"""deep_gemm's twin checks for ``make ascend-check`` (deepjit.tilelang_route.ascend_check, found through the
package's ``deepjit.ascend_checks`` entry point): each case runs one hand-written kernel on the twin through
its entry point at a modest shape, compares it with ``deep_gemm.reference`` at upstream's tolerance and
leaves the roofline to the twin's counters of the launch. The shapes are small enough for the twin on a few
CPU cores, so their rooflines say little about the kernels at the sizes that matter: ``published_shapes()``
gives those (4096^3 dense GEMMs, an 8 x 512 x 4096 x 7168 M-grouped GEMM, an MoE decode FP8 x FP4 grouped
GEMM of 8 x 48 tokens x 4096 x 7168, MQA logits prefill / decode at 8192 KV, a whole Mega MoE call on EP8 rank
processes: mega_estimates.py), each a run of the whole shape.
The package has no TileLang kernels, so nothing of it is lowered by ``make ascend-codegen``."""
from __future__ import annotations

import functools

import torch

from .. import reference
from .._operands import GroupedRows, KGroups, QuantOperand, attach_sf, resolve_recipes
from ..attention import PagedKV, Quantised
from ..grouped import _psum_row_groups
from ..testing import calc_diff
from ..utils import per_custom_dims_cast_to_fp8
from . import mega_estimates


def _close(name: str, got: torch.Tensor, want: torch.Tensor, limit: float) -> list[str]:
    diff = calc_diff(got.float(), want.float())
    return [] if diff < limit else [f"{name}: calc_diff {diff:.3g} >= {limit}"]


def _bf16_gemm() -> list[str]:
    from .bf16_gemm import bf16_gemm_nt
    a, b = torch.randn(512, 512).bfloat16(), torch.randn(512, 512).bfloat16()
    d, want = torch.empty(512, 512), torch.empty(512, 512)
    bf16_gemm_nt(a, b, d)
    reference.bf16_gemm_nt(a, b, want, None, None)
    return _close("d", d, want, 1e-5)


def _mx_operand(mn: int, k: int, fp4: bool = False, groups: int | None = None) -> QuantOperand:
    """A K-major MX operand with per-32 power-of-two scales: E4M3, or packed E2M1 pairs (int8); ``groups``
    of them stacked ``[groups, mn, ..]`` (M-grouped B)."""
    lead = () if groups is None else (groups,)
    if fp4:
        data = torch.randint(-128, 128, lead + (mn, k // 2), dtype=torch.int8)
    else:
        data = (torch.randn(lead + (mn, k)) * 8).to(torch.float8_e4m3fn)
    sf = torch.exp2(torch.randint(-6, 7, lead + (mn, k // 32)).float())
    return QuantOperand(data, sf, fp4, True, mn, k, groups, 1, 32)


def _fp8_gemm(b_fp4: bool = False):
    def run() -> list[str]:
        return _mx_gemm_case(b_fp4)
    return run


def _mx_gemm_case(b_fp4: bool) -> list[str]:
    """FP8 x FP8 (cube kernel) or FP8 x FP4 (the FP4 side widened into L1 by the vector cores)."""
    from .fp8_mx_gemm import fp8_gemm_nt
    a, b = _mx_operand(512, 512), _mx_operand(512, 512, b_fp4)
    d, want = torch.empty(512, 512), torch.empty(512, 512)
    fp8_gemm_nt(a, b, d)
    reference.fp8_fp4_gemm_nt(a, b, want)
    return _close("d", d, want, 1e-3)


def _m_grouped_bf16() -> list[str]:
    from .m_grouped_bf16_gemm import m_grouped_bf16_gemm_nt_contiguous
    a, b = torch.randn(768, 256).bfloat16(), torch.randn(3, 256, 256).bfloat16()
    ends = torch.tensor([200, 512, 700], dtype=torch.int32)
    row_group = torch.full((768,), -1, dtype=torch.int64)
    row_group[:200], row_group[256:512], row_group[512:700] = 0, 1, 2
    rows = GroupedRows(row_group, ends, True, 256)
    d, want = torch.zeros(768, 256, dtype=torch.bfloat16), torch.zeros(768, 256, dtype=torch.bfloat16)
    m_grouped_bf16_gemm_nt_contiguous(a, b, d, rows, True)
    reference.m_grouped_bf16_gemm_nt(a, b, want, rows, True)
    return _close("d", d, want, 1e-5)


def _m_grouped_bf16_m_indices() -> list[str]:
    from ..grouped import _indexed_row_groups
    from .m_grouped_bf16_gemm import m_grouped_bf16_gemm_nt_contiguous
    a, b = torch.randn(768, 256).bfloat16(), torch.randn(3, 256, 256).bfloat16()
    m_indices = torch.full((768,), -1, dtype=torch.int32)
    m_indices[:200], m_indices[256:512], m_indices[512:700] = 0, 1, 2
    row_group = _indexed_row_groups(m_indices, 768, 3, 256, False)
    rows = GroupedRows(row_group, row_group.to(torch.int32), False, 256)
    d, want = torch.zeros(768, 256, dtype=torch.bfloat16), torch.zeros(768, 256, dtype=torch.bfloat16)
    m_grouped_bf16_gemm_nt_contiguous(a, b, d, rows, True)
    reference.m_grouped_bf16_gemm_nt(a, b, want, rows, True)
    return _close("d", d, want, 1e-5)


def _m_grouped_fp8_fp4() -> list[str]:
    """FP8 x FP4 in the psum layout (the FP4 B widened into L1 by the vector cores), ragged groups."""
    from .m_grouped_fp8_mx_gemm import m_grouped_fp8_fp4_gemm_nt_contiguous
    rows = _psum_rows([200, 0, 188], 256, 768)
    a, b = _mx_operand(768, 512), _mx_operand(256, 512, True, groups=3)
    d, want = torch.zeros(768, 256, dtype=torch.bfloat16), torch.zeros(768, 256, dtype=torch.bfloat16)
    m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, rows, True)
    reference.m_grouped_fp8_fp4_gemm_nt(a, b, want, rows, True)
    return _close("d", d, want, 1e-3)


def _psum_rows(counts: list[int], alignment: int, m: int) -> GroupedRows:
    """The psum layout of ``counts`` rows per group, each group starting aligned."""
    row_group, ends = _psum_row_groups(torch.tensor(counts), m, alignment, "counts")
    return GroupedRows(row_group, ends, True, alignment)


def _k_grouped_bf16() -> list[str]:
    from .k_grouped_bf16_gemm import k_grouped_bf16_gemm_tn_contiguous
    a, b = torch.randn(512, 256).bfloat16(), torch.randn(512, 256).bfloat16()
    groups = KGroups([256, 0, 256], [0, 256, 256], [])
    c = torch.randn(3, 256, 256)
    d, want = c.clone(), c.clone()
    k_grouped_bf16_gemm_tn_contiguous(a, b, d, d, groups)
    reference.k_grouped_bf16_gemm_tn(a, b, want, want, groups)
    return _close("d", d, want, 1e-5)


def _pow2(*shape) -> torch.Tensor:
    return torch.exp2(torch.randint(-4, 5, shape).float())


def _mqa_inputs(s: int, s_kv: int, heads: int, head_dim: int, mx: bool = False):
    """Unscaled E4M3 q over per-token KV scales, or (``mx``) DeepGEMM-Ascend's MXFP8 form: per-32 UE8M0
    scales on both, BF16 weights."""
    q = torch.randn(s, heads, head_dim).to(torch.float8_e4m3fn)
    if mx:
        kv = torch.randn(s_kv, head_dim).to(torch.float8_e4m3fn)
        return (Quantised(q, _pow2(s, heads, head_dim // 32), False, False),
                Quantised(kv, _pow2(s_kv, head_dim // 32), False, False), torch.randn(s, heads).bfloat16())
    kv = Quantised(*per_custom_dims_cast_to_fp8(torch.randn(s_kv, head_dim), (0,), False), False, True)
    return Quantised(q, None, False, False), kv, torch.randn(s, heads)


def _mqa_logits(mx: bool, heads: int):
    def run() -> list[str]:
        from .mqa_logits import mqa_logits
        s, s_kv, head_dim = 64, 2048, 128
        q, kv, weights = _mqa_inputs(s, s_kv, heads, head_dim, mx)
        ke = torch.arange(s, dtype=torch.int32) + (s_kv - s) + 1   # causal prefill of the last s tokens
        ks = torch.zeros(s, dtype=torch.int32)
        dtype = torch.bfloat16 if mx else torch.float32
        got, want = torch.empty(s, s_kv, dtype=dtype), torch.empty(s, s_kv, dtype=dtype)
        mqa_logits(q, kv, weights, ks, ke, got, False, True)
        reference.mqa_logits(q, kv, weights, ks, ke, want, False, True)
        finite = torch.isfinite(want)
        bad = [] if torch.equal(finite, torch.isfinite(got)) else ["-inf outside [ks, ke) differs from the reference"]
        return bad + _close("logits", got[finite].float(), want[finite].float(), 1e-3)
    return run


def _paged_mqa_logits() -> list[str]:
    from .paged_mqa_logits import paged_mqa_logits
    batch, heads, head_dim, block_kv, max_ctx = 16, 32, 128, 64, 2048
    pages = max_ctx // block_kv
    values, sf = per_custom_dims_cast_to_fp8(torch.randn(batch * pages * block_kv, head_dim), (0,), False)
    cache = torch.cat([values.view(torch.uint8).view(batch * pages, -1), sf.view(torch.uint8).view(batch * pages, -1)],
                      dim=1).view(batch * pages, block_kv, 1, head_dim + 4)
    table = torch.randperm(batch * pages).view(batch, pages).to(torch.int32)
    q = Quantised(torch.randn(batch, 1, heads, head_dim).to(torch.float8_e4m3fn), None, False, False)
    kv = PagedKV(cache, False, head_dim)
    weights = torch.randn(batch, heads)
    lens = torch.randint(max_ctx // 2, max_ctx + 1, (batch, 1), dtype=torch.int32)
    got, want = torch.empty(batch, max_ctx), torch.empty(batch, max_ctx)
    paged_mqa_logits(q, kv, weights, lens, table, got, True)
    reference.paged_mqa_logits(q, kv, weights, lens, table, want, True)
    finite = torch.isfinite(want)
    bad = [] if torch.equal(finite, torch.isfinite(got)) else ["-inf past the lengths differs from the reference"]
    return bad + _close("logits", got[finite], want[finite], 1e-3)


def _sf_transform() -> list[str]:
    from .. import formats
    from ..layout import _ascend_int16
    from .sf_layout import transform_sf
    sf = torch.exp2(torch.randint(-20, 20, (4096, 64)).float())
    got = transform_sf(sf, 4096, 64, 1)
    want = _ascend_int16(sf, 4096)
    ok = torch.equal(got, want) and torch.equal(formats.unpack_ue8m0(got)[:, :64], sf)
    return [] if ok else ["int16 pairs differ from the reference"]


def _bf16_einsum() -> list[str]:
    """A grouped o_proj-style einsum bhr,hdr->bhd: 64 tokens, 8 groups of a 1024 x 512 weight."""
    from .bf16_einsum import bf16_einsum
    a, b = torch.randn(64, 8, 512).bfloat16(), torch.randn(8, 1024, 512).bfloat16()
    d = torch.empty(64, 8, 1024, dtype=torch.bfloat16)
    bf16_einsum("bhr,hdr->bhd", a, b, d, None)
    return _close("d", d, torch.einsum("bhr,hdr->bhd", a.float(), b.float()), 1e-5)


def _fp8_einsum() -> list[str]:
    """fp8_einsum bhr,hdr->bhd at 64 tokens, 8 groups of a 1024 x 512 weight, recipe (1, 128, 128), UE8M0 scales."""
    from .fp8_einsum import fp8_bmm

    def operand(data, sf, gran):
        op = QuantOperand(data, None, False, True, 0, 0, 0)
        op.groups, op.mn, op.k = data.shape
        attach_sf("x", op, sf, gran, False, False)
        return op
    a = (torch.randn(8, 64, 512) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(8, 1024, 512) * 4).to(torch.float8_e4m3fn)
    sfa, sfb = torch.exp2(torch.randint(-4, 5, (8, 64, 4)).float()), torch.exp2(torch.randint(-4, 5, (8, 8, 4)).float())
    gran_a, gran_b = resolve_recipes((1, 128, 128), None, None, sfa, sfb)
    op_a, op_b = operand(a, sfa, gran_a), operand(b, sfb, gran_b)
    d, want = torch.empty(8, 64, 1024, dtype=torch.bfloat16), torch.empty(8, 64, 1024, dtype=torch.bfloat16)
    fp8_bmm(op_a, op_b, d, None)
    reference.fp8_bmm(op_a, op_b, want, None)
    return _close("d", d, want, 1e-5)


def _hc_prenorm_inputs(m: int, splits: int):
    """DeepSeek-V4's mHC pre-norm GEMM: 4 streams of hidden 7168 (K = 28672), 24 mixes (N = 4 * (2 + 4))."""
    a, b = torch.randn(m, HC_K).bfloat16(), torch.randn(HC_N, HC_K)
    return a, b, torch.empty(splits, m, HC_N), torch.empty(splits, m)


def _hc_prenorm() -> list[str]:
    """256 tokens in 16 splits; the reference rounds B to HF32 as the cube does (upstream: TF32 vs TF32)."""
    from deepjit.tilelang_route.conformance.atomics_sync import round_hf32

    from .hc_prenorm_gemm import hc_prenorm_gemm
    a, b, d, sqr = _hc_prenorm_inputs(256, 16)
    hc_prenorm_gemm(a, b, d, sqr, 16)
    want_d, want_sqr = torch.empty(256, HC_N), torch.empty(256)
    reference.hc_prenorm_gemm(a, round_hf32(b, False), want_d, want_sqr, None)
    return _close("d", d.sum(0), want_d, 1e-8) + _close("sqr_sum", sqr.sum(0), want_sqr, 1e-8)


def _mega_swiglu() -> list[str]:
    """Mega MoE's SwiGLU step to FP8 on 200 of 256 rows (``ends[-1]``), against deep_gemm.mega's reference on the
    de-interleaved L1 output: dequantised values and the UE8M0 scales."""
    from .. import mega
    from ..utils.math import unpack_ue8m0_from_int
    from .mega_swiglu import swiglu_quant
    m, inter, rows = 256, 1024, 200
    natural = (torch.randn(m, 2 * inter) * 4).bfloat16()
    l1 = natural[:, mega._interleave_order(2 * inter, 8)]
    w = torch.rand(m)
    act, act_sf = swiglu_quant(l1, w, torch.tensor([rows // 2, rows], dtype=torch.int32), 10.0, True)
    want, want_sf = mega.swiglu_apply_weight_to_fp8(natural[:rows], w[:rows], 10.0)
    sf, ref_sf = unpack_ue8m0_from_int(act_sf[:rows]), unpack_ue8m0_from_int(want_sf)
    bad = int((sf != ref_sf).sum())
    return _close("act", act[:rows].float() * sf.repeat_interleave(32, 1),
                  want.float() * ref_sf.repeat_interleave(32, 1), 1e-5) + ([f"act_sf: {bad} scales differ"] if bad else [])


def cases() -> list:
    from deepjit.tilelang_route.ascend_check import SourceCase
    runs = [("bf16_gemm_nt_512x512x512", "cube", _bf16_gemm), ("fp8_mx_gemm_nt_512x512x512", "cube", _fp8_gemm()),
            ("fp8_fp4_mx_gemm_nt_512x512x512", "mix", _fp8_gemm(True)),
            ("m_grouped_bf16_gemm_psum_3x768x256x256", "cube", _m_grouped_bf16),
            ("m_grouped_bf16_gemm_m_indices_3x768x256x256", "cube", _m_grouped_bf16_m_indices),
            ("m_grouped_fp8_fp4_mx_gemm_psum_3x768x256x512", "mix", _m_grouped_fp8_fp4),
            ("k_grouped_bf16_gemm_tn_3x256x256", "mix", _k_grouped_bf16),
            ("fp8_mqa_logits_64q_2048kv_32x128", "mix", _mqa_logits(False, 32)),
            ("mxfp8_mqa_logits_64q_2048kv_64x128", "mix", _mqa_logits(True, 64)),
            ("fp8_paged_mqa_logits_16x1q_2048kv_32x128", "mix", _paged_mqa_logits),
            ("sf_transform_4096x2048", "vector", _sf_transform),
            ("tf32_hc_prenorm_gemm_256x24x28672_16splits", "mix", _hc_prenorm),
            ("bf16_einsum_bhr_hdr_bhd_64x8x1024x512", "cube", _bf16_einsum),
            ("fp8_einsum_bhr_hdr_bhd_64x8x1024x512", "cube", _fp8_einsum),
            ("mega_swiglu_fp8_200of256x1024", "vector", _mega_swiglu)]
    return [SourceCase(name, kind, _seeded(fn)) for name, kind, fn in runs]


# ---- published shapes: rooflines only (ascend_check.PublishedShape), each a run of the whole shape ---------
# (a few seconds to a minute each on the twin), so the L2 model sees every wave, including what later
# waves find in L2 from earlier ones.
GEMM = 4096                       # M = N = K of the published dense GEMM shapes
GROUPS, GROUP_M, GROUPED_N, GROUPED_K = 8, 512, 4096, 7168
MQA_KV, MQA_HEADS, MQA_DIM = 8192, 32, 128
HC_N, HC_K, HC_SPLITS = 24, 4 * 7168, 16  # the mHC pre-norm GEMM (also the test-shape case above)
MX_MQA_HEADS = 64  # DeepGEMM-Ascend's MXFP8 indexer: 4..64 heads
MOE_EXPERTS, MOE_TOKENS, MOE_N = 8, 48, 4096   # an EP rank's experts at decode, tokens each, gate + up rows


def _bf16_gemm_full() -> None:
    from .bf16_gemm import bf16_gemm_nt
    bf16_gemm_nt(torch.randn(GEMM, GEMM).bfloat16(), torch.randn(GEMM, GEMM).bfloat16(),
                 torch.empty(GEMM, GEMM, dtype=torch.bfloat16))


def _mx_gemm_full(fp4: bool):
    def run() -> None:
        from .fp8_mx_gemm import fp8_gemm_nt
        fp8_gemm_nt(_mx_operand(GEMM, GEMM, fp4), _mx_operand(GEMM, GEMM, fp4),
                    torch.empty(GEMM, GEMM, dtype=torch.bfloat16))
    return run


def _m_grouped_full() -> None:
    """8 groups of 512 rows in the psum layout, each against its own 4096 x 7168 B."""
    from .m_grouped_bf16_gemm import m_grouped_bf16_gemm_nt_contiguous
    m = GROUPS * GROUP_M
    rows = GroupedRows(torch.arange(m) // GROUP_M, torch.arange(1, GROUPS + 1, dtype=torch.int32) * GROUP_M, True,
                       GROUP_M)
    a, b = torch.randn(m, GROUPED_K).bfloat16(), torch.randn(GROUPS, GROUPED_N, GROUPED_K).bfloat16()
    m_grouped_bf16_gemm_nt_contiguous(a, b, torch.empty(m, GROUPED_N, dtype=torch.bfloat16), rows, True)


def _m_grouped_fp8_fp4_decode() -> None:
    """MoE decode's L1 GEMM on one rank: 8 experts of 48 tokens each (psum, alignment 128, zero padding, the
    public op's default), FP8 activations against FP4 gate / up weights (N = 2 x 2048) over hidden 7168: the
    weights' bytes dominate."""
    from .m_grouped_fp8_mx_gemm import m_grouped_fp8_fp4_gemm_nt_contiguous
    g, n, k = MOE_EXPERTS, MOE_N, GROUPED_K
    rows = _psum_rows([MOE_TOKENS] * g, 128, g * 128)
    a, b = _mx_operand(g * 128, k), _mx_operand(n, k, True, groups=g)
    m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, torch.empty(g * 128, n, dtype=torch.bfloat16), rows, True)


def _mqa_full(s: int, mx: bool = False):
    """s queries against the whole KV: every query sees all of it (ks = 0, ke = s_kv), so no tile is skipped;
    ``mx``: DeepGEMM-Ascend's MXFP8 form. BF16 logits in both, the output of the measured indexer (DeepGEMM-
    Ascend's), so the same work as the published figures (FP32 logits keep FP32 scores: twice FixPipe's bytes)."""
    def run() -> None:
        from .mqa_logits import mqa_logits
        q, kv, weights = _mqa_inputs(s, MQA_KV, MX_MQA_HEADS if mx else MQA_HEADS, MQA_DIM, mx)
        mqa_logits(q, kv, weights, torch.zeros(s, dtype=torch.int32), torch.full((s,), MQA_KV, dtype=torch.int32),
                   torch.empty(s, MQA_KV, dtype=torch.bfloat16), False, True)
    return run


def _hc_prenorm_full(m: int):
    def run() -> None:
        from .hc_prenorm_gemm import hc_prenorm_gemm
        hc_prenorm_gemm(*_hc_prenorm_inputs(m, HC_SPLITS), HC_SPLITS)
    return run


def published_shapes() -> list:
    from deepjit.tilelang_route.ascend_check import PublishedShape

    gemm = f"{GEMM}x{GEMM}x{GEMM}"
    shapes = [(f"bf16_gemm_nt_{gemm}", "cube", _bf16_gemm_full),
              (f"fp8_mx_gemm_nt_{gemm}", "cube", _mx_gemm_full(False)),
              (f"fp4_mx_gemm_nt_{gemm}", "cube", _mx_gemm_full(True)),
              (f"m_grouped_bf16_gemm_psum_{GROUPS}x{GROUP_M}x{GROUPED_N}x{GROUPED_K}", "cube", _m_grouped_full),
              (f"m_grouped_fp8_fp4_mx_gemm_decode_{MOE_EXPERTS}x{MOE_TOKENS}x{MOE_N}x{GROUPED_K}", "mix",
               _m_grouped_fp8_fp4_decode)]
    for phase, s in (("prefill", 4096), ("decode", 256)):
        shapes.append((f"fp8_mqa_logits_{phase}_{s}q_{MQA_KV}kv_{MQA_HEADS}x{MQA_DIM}", "mix", _mqa_full(s)))
        shapes.append((f"mxfp8_mqa_logits_{phase}_{s}q_{MQA_KV}kv_{MX_MQA_HEADS}x{MQA_DIM}", "mix", _mqa_full(s, True)))
    for phase, m in (("prefill", 4096), ("decode", 128)):
        shapes.append((f"tf32_hc_prenorm_gemm_{phase}_{m}x{HC_N}x{HC_K}_{HC_SPLITS}splits", "mix", _hc_prenorm_full(m)))
    mega = [PublishedShape(f"fp8_fp4_mega_moe_ep{mega_estimates.RANKS}_{shape.name}", "mix",
                           functools.partial(mega_estimates.published_shape_outcome, shape), multi_rank=True)
            for shape in mega_estimates.SHAPES]   # beside DeepSeek's figure
    return [PublishedShape(name, kind, _seeded(fn)) for name, kind, fn in shapes] + mega


def _seeded(fn):
    def run() -> list[str]:
        torch.manual_seed(0)
        return fn()
    return run

