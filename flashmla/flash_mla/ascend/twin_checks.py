"""flash_mla's twin checks for ``make ascend-check`` (deepjit.tilelang_route.ascend_check, found through
the package's ``deepjit.ascend_checks`` entry point): each ``SourceCase`` runs ``sparse_mla.asc`` (every
cache format, d_qk 512 and 576), ``dense_attn.asc`` or ``kv_relayout.asc`` on the twin through its entry
point at a modest shape (64 heads: one full cube block; DeepSeek's dense MLA decode: 128 query heads over
one kv head, d_qk 576 / d_v 512, page 64) and compares it with ``flash_mla.reference`` at upstream's cos-diff
and lse tolerances (the relayout byte for byte); the roofline comes from the twin's counters of the launch.
``published_shapes()`` adds rooflines at upstream's benchmark shapes. The package has no TileLang kernels,
so nothing of it is lowered by ``make ascend-codegen``."""
from __future__ import annotations

import torch

from .. import reference
from .._operands import KVCacheFormat, KVScope
from ..kv_cache import quantize_k_cache


def _cos_diff(name: str, got: torch.Tensor, want: torch.Tensor, limit: float) -> list[str]:
    a, b = got.double(), want.double()
    diff = float(1 - 2 * (a * b).sum() / (a * a + b * b).sum().clamp_min(1e-30))
    return [] if diff <= limit else [f"{name}: cos diff {diff:.3g} > {limit}"]


def _stat(name: str, got: torch.Tensor, want: torch.Tensor, rel: float) -> list[str]:
    finite = torch.isfinite(want)
    if not torch.equal(finite, torch.isfinite(got)) or not torch.equal(got[~finite], want[~finite]):
        return [f"{name}: infinities differ from the reference"]
    err = (got[finite] - want[finite]).abs()
    bad = (err >= 1e-6) & (err >= rel * want[finite].abs())
    return [f"{name}: {int(bad.sum())} values out of tolerance"] if bad.any() else []


def _scope(fmt: KVCacheFormat, b: int, topk: int, blocks: int, page: int = 64, placement: str | None = None,
           s_q: int = 1) -> KVScope:
    k = (torch.randn(blocks, page, 1, fmt.d_qk) / 10).bfloat16()
    idx = torch.randint(0, blocks * page, (b, s_q, topk), dtype=torch.int32)
    idx[torch.rand(idx.shape) < 0.1] = -1
    placement = fmt.placement(placement)
    return KVScope(quantize_k_cache(k, fmt, placement), fmt, placement, idx,
                   torch.randint(topk // 2, topk + 1, (b,), dtype=torch.int32))


def _varlen_scope(fmt: KVCacheFormat, b: int, s_q: int, topk: int, seq: int, page: int = 64) -> KVScope:
    """FlashMLA's benchmark caches (``is_varlen``): request r holds max(N(seq, seq / 2), s_q) tokens in its own
    pages; each query row picks top-k distinct tokens of its request, -1 past a short request's length; no
    top-k lengths (the loop runs the whole top-k)."""
    lens = [max(int(torch.normal(float(seq), seq / 2, ())), s_q) for _ in range(b)]
    stride = -(-max(lens) // page) * page   # tokens a request's pages span
    k = (torch.randn(b * stride // page, page, 1, fmt.d_qk) / 10).bfloat16()
    idx = torch.full((b, s_q, topk), -1, dtype=torch.int32)
    for r in range(b):
        for q in range(s_q):
            pos = torch.randperm(lens[r])[:topk]
            idx[r, q, :len(pos)] = r * stride + pos
    placement = fmt.placement("interleaved")
    return KVScope(quantize_k_cache(k, fmt, placement), fmt, placement, idx, None)


def _decode_inputs(main: tuple, extra: tuple | None, b: int, h_q: int, s_q: int = 1):
    """q, scopes and sink for a decode over main (fmt, placement, topk, blocks) and an optional extra cache."""
    d_qk = main[0].d_qk
    q = torch.randn(b, s_q, h_q, d_qk).clamp(-1, 1).bfloat16()
    caches = [main] if extra is None else [main, extra]
    scopes = [_scope(f, b, topk, blocks, placement=pl, s_q=s_q) for f, pl, topk, blocks in caches]
    return q, scopes, torch.randn(h_q) + 4


def _decode(main: tuple, extra: tuple | None, b: int = 4, h_q: int = 64):
    def run() -> list[str]:
        from .sparse_attn import sparse_decode
        q, scopes, sink = _decode_inputs(main, extra, b, h_q)
        scale = q.shape[-1] ** -0.5
        out, lse = sparse_decode(q, scopes, scale, 512, sink, False)
        want_out, want_lse = reference.sparse_decode(q, scopes, scale, 512, sink)
        return _cos_diff("out", out, want_out, 5e-6) + _stat("lse", lse, want_lse, 8.01 / 65536)
    return run


def _prefill(d_qk: int = 512) -> list[str]:
    from .sparse_attn import sparse_prefill
    s_q, s_kv, h_q, topk = 8, 1024, 64, 512
    q = (torch.randn(s_q, h_q, d_qk) / 10).bfloat16()
    kv = (torch.randn(s_kv, 1, d_qk) / 10).bfloat16()
    idx = torch.stack([torch.randperm(s_kv)[:topk] for _ in range(s_q)]).view(s_q, 1, topk).int()
    got = sparse_prefill(q, kv, idx, d_qk ** -0.5, 512, None, None)
    want = reference.sparse_prefill(q, kv, idx, d_qk ** -0.5, 512, None, None)
    return (_cos_diff("out", got[0], want[0], 7e-6) + _stat("max_logits", got[1], want[1], 2.01 / 65536)
            + _stat("lse", got[2], want[2], 2.01 / 65536))


def _dense_decode_inputs(b: int, s_q: int, s_k: int, h_q: int = 128, page: int = 64):
    blocks = -(-s_k // page)
    q = (torch.randn(b, s_q, h_q, 576) / 10).bfloat16()
    k_cache = (torch.randn(b * blocks, page, 1, 576) / 10).bfloat16()
    block_table = torch.randperm(b * blocks).view(b, blocks).int()
    seqlens = torch.randint(s_k - page, s_k + 1, (b,), dtype=torch.int32)
    return q, k_cache, block_table, seqlens


def _dense_decode() -> list[str]:
    from .dense_attn import dense_decode
    q, k_cache, block_table, seqlens = _dense_decode_inputs(2, 2, 1024)
    out, lse = dense_decode(q, k_cache, block_table, seqlens, 512, 576 ** -0.5, True)
    want_out, want_lse = reference.dense_decode(q, k_cache, block_table, seqlens, 512, 576 ** -0.5, True)
    return _cos_diff("out", out, want_out, 5e-6) + _stat("lse", lse, want_lse, 8.01 / 65536)


def _dense_varlen() -> list[str]:
    from .dense_attn import varlen_attention
    cu_q = torch.tensor([0, 200, 456], dtype=torch.int32)   # two causal prefill chunks, MHA dims 192 / 128
    q = (torch.randn(456, 16, 192) / 10).bfloat16()
    k = (torch.randn(456, 16, 192) / 10).bfloat16()
    v = (torch.randn(456, 16, 128) / 10).bfloat16()
    out, lse = varlen_attention(q, k, v, cu_q, cu_q, 192 ** -0.5, True)
    want_out, want_lse = reference.varlen_attention(q, k, v, cu_q, cu_q, 192 ** -0.5, True)
    return _cos_diff("out", out, want_out, 7e-6) + _stat("lse", lse, want_lse, 2.01 / 65536)
def _relayout() -> list[str]:
    from .kv_relayout import kv_relayout
    fmt = KVCacheFormat.V41_FP8
    k = (torch.randn(64, 64, 1, 512) / 10).bfloat16()
    inter, split = (quantize_k_cache(k, fmt, p) for p in ("interleaved", "block_split"))
    bad = []
    for src, to, want in ((inter, "block_split", split), (split, "interleaved", inter)):
        if not torch.equal(kv_relayout(src, fmt, to).view(torch.uint8), want.view(torch.uint8)):
            bad.append(f"to {to}: bytes differ from quantize_k_cache's {to} cache")
    return bad


def _seeded(fn):
    def run() -> list[str]:
        torch.manual_seed(0)
        return fn()
    return run


def cases() -> list:
    from deepjit.tilelang_route.ascend_check import SourceCase
    F = KVCacheFormat
    runs = [("sparse_mla_decode_b4_h64_topk512+128_fp8+fp4", "mix",
             _decode((F.V41_FP8, "interleaved", 512, 64), (F.V41_FP4, "interleaved", 128, 16))),
            ("sparse_mla_decode_b4_h64_topk512+128_fp8+fp4_block_split", "mix",
             _decode((F.V41_FP8, "block_split", 512, 64), (F.V41_FP4, "block_split", 128, 16))),
            ("sparse_mla_decode_b4_h64_topk512_v32_d576", "mix", _decode((F.V32_FP8, None, 512, 64), None)),
            ("sparse_mla_decode_b4_h64_topk512+128_model1", "mix",
             _decode((F.MODEL1_FP8, None, 512, 64), (F.MODEL1_FP8, None, 128, 16))),
            ("sparse_mla_prefill_sq8_h64_topk512", "mix", _prefill),
            ("sparse_mla_prefill_sq8_h64_topk512_d576", "mix", lambda: _prefill(576)),
            ("kv_relayout_fp8_64x64_both_ways", "vector", _relayout),
            ("dense_mla_decode_b2_sq2_h128_kv1024_causal", "mix", _dense_decode),
            ("dense_varlen_fwd_2x228_h16_d192_128_causal", "mix", _dense_varlen)]
    return [SourceCase(name, kind, _seeded(fn)) for name, kind, fn in runs]


# ---- published shapes: a timeline / roofline estimate only (ascend_check.PublishedShape), the whole shape ----
# FlashMLA's sparse prefill as measured on the 950 (tile-ai/tilelang examples/ascend/flashmla/RESULTS.md:
# nq 4096, 64 heads, d 512, top-k 640, KV 8192: 853.78 us for the reference kernel); ours runs it without
# attention sinks. Several minutes on the twin.
PUBLISHED_PREFILL = {"s_q": 4096, "s_kv": 8192, "h_q": 64, "topk": 640}


def _prefill_published() -> None:
    from .sparse_attn import sparse_prefill
    s_q, s_kv, h_q, topk = (PUBLISHED_PREFILL[k] for k in ("s_q", "s_kv", "h_q", "topk"))
    q = (torch.randn(s_q, h_q, 512) / 10).bfloat16()
    kv = (torch.randn(s_kv, 1, 512) / 10).bfloat16()
    idx = torch.stack([torch.randperm(s_kv)[:topk] for _ in range(s_q)]).view(s_q, 1, topk).int()
    sparse_prefill(q, kv, idx, 512 ** -0.5, 512, None, None)


# FlashMLA's dense MLA decode benchmark shape (upstream's dense decoding test / benchmark: batch 128, 128 query
# heads over one kv head, d_qk 576 / d_v 512, page 64, s_q 1, cache length 4096): 256 work items (two 64-row
# blocks per request), 8 waves on the 32 cube cores. A few minutes on the twin.
PUBLISHED_DENSE_DECODE = {"b": 128, "s_q": 1, "s_k": 4096}


def _dense_decode_published() -> None:
    from .dense_attn import dense_decode
    p = PUBLISHED_DENSE_DECODE
    q, k_cache, block_table, _ = _dense_decode_inputs(p["b"], p["s_q"], p["s_k"])
    dense_decode(q, k_cache, block_table, torch.full((p["b"],), p["s_k"], dtype=torch.int32), 512, 576 ** -0.5, False)


# DeepSeek decode shapes (upstream FlashMLA's sparse decode tests and benchmarks): V3.2, 128 heads of
# d_qk 576 over top-2048 tokens of the 656 B cache; V4 (MODEL1), 64 heads over top-512 of the main
# cache plus top-128 of an extra (compressed) cache; one decode token per request, 64 requests.
PUBLISHED_DECODE = {
    "v32": ((KVCacheFormat.V32_FP8, None, 2048, 1024), None, 64, 128),
    "model1": ((KVCacheFormat.MODEL1_FP8, None, 512, 1024), (KVCacheFormat.MODEL1_FP8, None, 128, 256), 64, 64),
}


def _decode_published(main: tuple, extra: tuple | None, b: int, h_q: int):
    def run() -> None:
        from .sparse_attn import sparse_decode
        q, scopes, sink = _decode_inputs(main, extra, b, h_q)
        sparse_decode(q, scopes, q.shape[-1] ** -0.5, 512, sink, False)
    return run


# V4.1 decode as measured on the 950 (tile-ai/tilelang examples/ascend/flashmla/RESULTS.md, its first and
# fifth decode cases: 78.44 / 70.60 us for the reference kernel): 64 requests of 4 queries, 64 heads, d 512,
# attention sinks, an FP8 main cache (top-128, 256 tokens a request) and an FP8 or FP4 extra cache (top-512,
# 2048 tokens a request), variable cache lengths, no top-k lengths.
PUBLISHED_V41 = {"b": 64, "s_q": 4, "h_q": 64, "topk": 128, "seq": 256, "extra_topk": 512, "extra_seq": 2048}


def _v41_published(extra: KVCacheFormat):
    def run() -> None:
        from .sparse_attn import sparse_decode
        p = PUBLISHED_V41
        q = torch.randn(p["b"], p["s_q"], p["h_q"], 512).clamp(-1, 1).bfloat16()
        scopes = [_varlen_scope(KVCacheFormat.V41_FP8, p["b"], p["s_q"], p["topk"], p["seq"]),
                  _varlen_scope(extra, p["b"], p["s_q"], p["extra_topk"], p["extra_seq"])]
        sparse_decode(q, scopes, 512 ** -0.5, 512, torch.randn(p["h_q"]) + 4, False)
    return run


def published_shapes() -> list:
    from deepjit.tilelang_route.ascend_check import PublishedShape
    p = PUBLISHED_PREFILL
    shapes = [PublishedShape(f"sparse_mla_prefill_sq{p['s_q']}_kv{p['s_kv']}_h{p['h_q']}_topk{p['topk']}", "mix",
                             _seeded(_prefill_published))]
    for name, (main, extra, b, h_q) in PUBLISHED_DECODE.items():
        topk = f"{main[2]}+{extra[2]}" if extra else f"{main[2]}"
        shapes.append(PublishedShape(f"sparse_mla_decode_{name}_b{b}_h{h_q}_topk{topk}", "mix",
                                     _seeded(_decode_published(main, extra, b, h_q))))
    v = PUBLISHED_V41
    for name, extra in (("fp8", KVCacheFormat.V41_FP8), ("fp4", KVCacheFormat.V41_FP4)):
        shapes.append(PublishedShape(f"sparse_mla_decode_v41_fp8+{name}_b{v['b']}_sq{v['s_q']}_h{v['h_q']}_topk"
                                     f"{v['topk']}+{v['extra_topk']}_varlen", "mix", _seeded(_v41_published(extra))))
    d = PUBLISHED_DENSE_DECODE
    shapes.append(PublishedShape(f"dense_mla_decode_b{d['b']}_sq{d['s_q']}_h128_kv{d['s_k']}", "mix",
                                 _seeded(_dense_decode_published)))
    return shapes

