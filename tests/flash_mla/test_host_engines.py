"""The host attention kernels on every matrix engine this CPU has (brgemm, avx512bf16, fma; brgemm also
for older targets than this CPU), built on the engine named whatever the process defaults to, against
the reference at tails: head counts not a multiple of 16, token counts not a multiple of the token block
(128, 256 on brgemm) or of the 32-token transpose, d_qk and d_v off the tile sizes. The cases also
walk the brgemm engine's ways to its A operand: K rows equally spaced in place (dense pages of 16 and
64 tokens, a varlen sequence, a strided KV, a run of consecutive prefill ids), rows copied (gathered
ids, a reversed run, repeats, runs shorter than 16) and invalid ids in between."""
import math

import pytest
import torch

import flash_mla
from deepjit.backends.host import HostCompilerOptions, cpu_identity
from deepjit.backends.host import matrix_engine as me
from flash_mla import host as fmla_host
from flash_mla import reference
from flash_mla._operands import KVCacheFormat, _flat_bytes
from flash_mla.reference.sparse import KVScope

from .compare import DECODE_LSE, DECODE_OUT, DENSE_OUT, PREFILL_OUT, PREFILL_STAT, assert_close, make_cache

ENGINES = me.present_engines(cpu_identity()[1])
_FLAGS = set(cpu_identity()[1].split())
# brgemm also built for older targets, as it runs on CPUs without their instructions: AVX2 only (the
# scalar softmax and dequantisation) and AVX-512 without VBMI and BF16 (the word-arithmetic dequantisation)
_OLDER = {"x86-64-v3": {"avx2", "fma", "bmi2", "movbe"},
          "skylake-avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}}
BUILDS = [(e, None) for e in ENGINES] + [("brgemm", m) for m, need in _OLDER.items()
                                         if "brgemm" in ENGINES and need <= _FLAGS]


class _OnEngine:
    """flash_mla's library with every host kernel built on ``engine`` (for the ``march`` target if given)."""

    def __init__(self, lib, engine: str, march: str | None = None):
        self._lib, self._options = lib, HostCompilerOptions(matrix_engine=engine, march=march)

    def host_kernel(self, name, path, defines=None, options=None):
        return self._lib.host_kernel(name, path, defines, self._options)

    def __getattr__(self, name):
        return getattr(self._lib, name)


@pytest.fixture(params=BUILDS, ids=lambda b: b[0] if b[1] is None else f"{b[0]}-{b[1]}")
def engine(request, monkeypatch):
    name, march = request.param
    monkeypatch.setattr(fmla_host, "LIB", _OnEngine(fmla_host.LIB, name, march))
    return name if march is None else f"{name}, {march}"


def _prefill_ids(s_kv: int, topk: int, g: torch.Generator) -> torch.Tensor:
    """Rows of ids mixing every kind of K row run: consecutive, reversed, repeated, short, invalid."""
    rest = lambda: torch.randperm(s_kv, generator=g)[:topk]  # noqa: E731
    rows = [
        torch.cat([torch.arange(10, 50), rest()]),                          # a long run, then gathered
        torch.cat([rest()[:30], torch.arange(200, 60, -1), rest()]),       # a reversed run
        torch.cat([torch.full((20,), 7), torch.arange(100, 115), torch.arange(150, 166), rest()]),
        torch.cat([torch.arange(0, 60), torch.tensor([-1, s_kv, 3]), torch.arange(61, 300)]),
    ]
    rows = [r[:topk] for r in rows]
    return torch.stack(rows).view(4, 1, topk).to(torch.int32)


@pytest.mark.parametrize("h_q,d_qk,topk", [(64, 576, 165), (128, 512, 293), (64, 576, 16)])
def test_sparse_prefill_tails(engine, h_q, d_qk, topk):
    g = torch.Generator().manual_seed(h_q + topk)
    s_kv = 300
    q = (torch.randn(4, h_q, d_qk, generator=g) / 10).bfloat16()
    # KV rows 640 elements apart: the in-place runs read with a leading dimension past d_qk
    kv = (torch.randn(s_kv, 1, 640, generator=g) / 10).bfloat16()[:, :, :d_qk]
    idx = _prefill_ids(s_kv, topk, g)
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, 0.3, 512)
    ref = reference.sparse_prefill(q, kv, idx, 0.3, 512, None, None)
    assert_close(out, ref[0], PREFILL_OUT, f"out ({engine})")
    assert_close(max_logits, ref[1], PREFILL_STAT, f"max_logits ({engine})")
    assert_close(lse, ref[2], PREFILL_STAT, f"lse ({engine})")


@pytest.mark.parametrize("page,h_q,seqlens", [(16, 20, [37, 290]), (64, 128, [129, 5]), (8, 3, [70, 1])])
def test_dense_decode_tails(engine, page, h_q, seqlens):
    g = torch.Generator().manual_seed(page + h_q)
    b, s_q = len(seqlens), 2
    cache_seqlens = torch.tensor(seqlens, dtype=torch.int32)
    max_blocks = max(seqlens) // page + 1
    block_table = torch.randperm(b * max_blocks, generator=g).view(b, max_blocks).int()
    k_cache = (torch.randn(b * max_blocks, page, 1, 576, generator=g) / 10).bfloat16()
    q = (torch.randn(b, s_q, h_q, 576, generator=g) / 10).bfloat16()
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512, meta, causal=True)
    ref_out, ref_lse = reference.dense_decode(q, k_cache, block_table, cache_seqlens, 512, 576 ** -0.5, True)
    assert_close(out, ref_out, DENSE_OUT, f"out ({engine})")
    assert_close(lse, ref_lse, DECODE_LSE, f"lse ({engine})")


@pytest.mark.parametrize("h_q,h_kv,d_qk,d_v", [(6, 2, 72, 32), (17, 1, 192, 128)])
def test_varlen_tails(engine, h_q, h_kv, d_qk, d_v):
    g = torch.Generator().manual_seed(h_q * d_qk)
    cu_q = torch.tensor([0, 5, 40, 41], dtype=torch.int32)
    cu_k = torch.tensor([0, 150, 190, 331], dtype=torch.int32)
    # packed K and V (one tensor, V after K): rows d_qk + d_v elements apart
    kv = (torch.randn(331, h_kv, d_qk + d_v, generator=g) / 10).bfloat16()
    k, v = kv[..., :d_qk], kv[..., d_qk:]
    q = (torch.randn(41, h_q, d_qk, generator=g) / 10).bfloat16()
    for causal in (False, True):
        out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 35, 150, causal=causal)
        ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, d_qk ** -0.5, causal)
        assert_close(out, ref_out, (1e-3, 8.01 / 128, 7e-6), f"out ({engine}, causal={causal})")
        assert_close(lse, ref_lse, (1e-6, 2.01 / 65536, None), f"lse ({engine}, causal={causal})")


@pytest.mark.parametrize("fmt,h_q,topk", [(KVCacheFormat.V32_FP8, 128, 150), (KVCacheFormat.V41_FP8, 64, 300)])
def test_sparse_decode_tails(engine, fmt, h_q, topk):
    g = torch.Generator().manual_seed(h_q + topk)
    b, page, num_blocks = 3, 64, 8
    cache = make_cache(fmt, num_blocks, page, seed=h_q)
    idx = torch.randint(0, num_blocks * page, (b, 1, topk), generator=g, dtype=torch.int32)
    idx[0, 0, 5:40:3] = -1                      # invalid ids inside a block
    idx[1, 0, 128:] = -1                        # a whole block invalid
    topk_length = torch.tensor([topk, topk - 23, 1], dtype=torch.int32)
    q = (torch.randn(b, 1, h_q, fmt.d_qk, generator=g) / 10).bfloat16()
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, None, None, False, True, idx,
                                                topk_length=topk_length)
    scope = KVScope(cache, fmt, fmt.placement(), idx, topk_length)
    ref_out, ref_lse = reference.sparse_decode(q, [scope], fmt.d_qk ** -0.5, 512, None)
    assert_close(out, ref_out, DECODE_OUT, f"out ({engine})")
    assert_close(lse, ref_lse, DECODE_LSE, f"lse ({engine})")
    assert not math.isnan(float(out.float().sum()))


# UE8M0 scale bytes spanning the BF16-exact fast path (10 ..= 246) and the FP32 path either side;
# 246 keeps the largest code (448) finite. A token takes the fast path only when all its 16 scale bytes
# are in range: tokens 0..7 roll IN_RANGE, tokens 8..15 roll SCALE_BYTES (the FP32 path).
SCALE_BYTES = [0, 1, 5, 9, 10, 11, 30, 60, 100, 127, 150, 200, 230, 240, 245, 246]
IN_RANGE = [10, 11, 20, 30, 45, 60, 80, 100, 115, 127, 150, 200, 230, 240, 245, 246]


@pytest.mark.parametrize("placement", ["interleaved", "block_split"])
def test_fp8_dequantisation_every_code_and_scale(engine, placement):
    # 16 tokens of V4.1 FP8 (32 codes per scale byte, each code twice a token): every code meets every
    # byte of IN_RANGE (tokens 0..7) and of SCALE_BYTES (8..15); a zero query makes each row's one valid
    # token weigh 1, so out is its dequantised V exactly
    fmt = KVCacheFormat.V41_FP8
    cache = make_cache(fmt, 2, 8, placement, seed=3)
    flat, p = _flat_bytes(cache), cache.shape[1]
    codes = torch.arange(256, dtype=torch.uint8).repeat(2)
    for t in range(16):
        base, slot = (t // p) * cache.stride(0), t % p
        data = base + slot * (528 if placement == "interleaved" else 512)
        scales = data + 512 if placement == "interleaved" else base + p * 512 + slot * 16
        flat[data:data + 512] = codes
        flat[scales:scales + 16] = torch.tensor(IN_RANGE if t < 8 else SCALE_BYTES, dtype=torch.uint8).roll(t)
    idx = torch.arange(16, dtype=torch.int32).view(16, 1, 1)
    q = torch.zeros(16, 1, 64, 512, dtype=torch.bfloat16)
    meta, _ = flash_mla.get_mla_metadata()
    out, _ = flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, None, None, False, True, idx,
                                              kv_layout=placement)
    v = flash_mla.dequantize_k_cache(cache, fmt, placement).view(-1, 512)[:16].nan_to_num(nan=0.0)
    # BF16 subnormal values are left out: the matrix engines flush them in the attention products
    # (AMX and vdpbf16ps treat BF16 denormals as zero); the sums also give +0 for -0
    kept = (v.abs() >= 2.0 ** -126) | (v == 0)
    assert kept.float().mean() > 0.8
    got = out[:, 0]
    assert all(torch.equal(got[:, h][kept], v[kept]) for h in (0, 63))


# FP32 scales of V3.2 tiles: products normal or not (below 2^-110 the one-instruction BF16 conversion
# would flush them), rounding in BF16, and negative
V32_SCALES = [1.0, 0.1, 3.7e-3, 2.0 ** -115, 1.0e-35, 1.0e3, 7.25e30, -0.3]


def test_fp8_dequantisation_v32_every_code_and_scale(engine):
    # as above for V3.2 FP8 (4 FP32 scales of 128 codes each): every code meets every scale
    fmt = KVCacheFormat.V32_FP8
    cache = make_cache(fmt, 2, 8, seed=4)
    flat, p = _flat_bytes(cache), cache.shape[1]
    codes = torch.arange(256, dtype=torch.uint8).repeat(2)
    for t in range(16):
        data = (t // p) * cache.stride(0) + (t % p) * 656
        flat[data:data + 512] = codes.roll(128 * (t // 8))
        scales = torch.tensor([V32_SCALES[(t + j) % 8] for j in range(4)], dtype=torch.float32)
        flat[data + 512:data + 528] = scales.view(torch.uint8)
    idx = torch.arange(16, dtype=torch.int32).view(16, 1, 1)
    q = torch.zeros(16, 1, 64, 576, dtype=torch.bfloat16)
    meta, _ = flash_mla.get_mla_metadata()
    out, _ = flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, None, None, False, True, idx)
    v = flash_mla.dequantize_k_cache(cache, fmt).view(-1, 576)[:16, :512].nan_to_num(nan=0.0)
    kept = (v.abs() >= 2.0 ** -126) | (v == 0)
    assert kept.float().mean() > 0.7
    got = out[:, 0]
    assert all(torch.equal(got[:, h][kept], v[kept]) for h in (0, 63))


@pytest.mark.parametrize("scale", [0.5, -0.5, 1e30])
def test_sparse_prefill_huge_logits(engine, scale):
    """Logits of ~1e10 (and, scaled by 1e30, past FP32's range): each row's max token weighs exactly its
    share (out 1.0, lse finite) and an overflowing scale gives NaN as the reference's inf - inf, on every
    engine (the softmax subtracts the max from the very value it was taken from)."""
    q = torch.full((2, 64, 512), 2.0 ** 12, dtype=torch.bfloat16)
    kv = torch.full((64, 1, 512), 2.0 ** 12, dtype=torch.bfloat16)  # q . k = 2^33 ~ 8.6e9
    idx = torch.arange(64, dtype=torch.int32).view(1, 1, 64).expand(2, 1, 64).contiguous()
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, scale, 512)
    ref = reference.sparse_prefill(q, kv, idx, scale, 512, None, None)
    assert_close(out, ref[0], PREFILL_OUT, f"out ({engine})")
    assert_close(max_logits, ref[1], PREFILL_STAT, f"max_logits ({engine})")
    assert_close(lse, ref[2], PREFILL_STAT, f"lse ({engine})")
