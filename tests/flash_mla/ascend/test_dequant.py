"""The Ascend sparse decode kernel's token dequantisation (SIMD registers: sparse_mla_vec.h dequant_vf) bit for
bit up to the sign of a zero (a zeroed NaN scale's products keep their codes' signs), on deepjit's twin: each row reads one valid token among -1 ids, so its softmax weight is 1 and out is
that token's dequantised V exactly; q is 0 on the V dims (a NaN or inf left in K would make the row NaN) and
random on V3.2's RoPE dims, which only lse sees. The tokens carry every E4M3 code (FP4: every E2M1 pair) at
every position modulo 4 (a wrong quarter order moves values), a different scale in each group (a wrong scale
lane scales by its neighbour's), NaN codes (0x7F, 0xFF: 0), a NaN scale (E8M0 0xFF, FP32 NaN, E4M3 0x7F /
0xFF: the group is 0), E8M0 0 (2^-127: subnormal products), RoPE NaN (0) and -0 (kept)."""
import torch

import flash_mla
from flash_mla import reference
from flash_mla._operands import KVCacheFormat, _flat_bytes
from flash_mla.ascend import sparse_attn
from flash_mla.reference.sparse import KVScope

from ..compare import DECODE_LSE, assert_close, make_cache

F = KVCacheFormat
TOKENS, PAGE, TOPK = 8, 4, 64
E8M0 = [0, 1, 100, 110, 120, 127, 130, 140, 200, 246, 60, 90, 115, 125, 135, 145]
F32 = [1.0, 0.1, 3.7e-3, 2.0 ** -115, 1.0e-37, 1.0e3, 7.25e30, -0.3]
NAN_SCALE_TOKEN, NAN_ROPE_TOKEN = 5, 3


def _records(fmt: KVCacheFormat, placement):
    """A cache of TOKENS tokens with the bytes above, and (data, scales) byte offsets of each token."""
    cache = make_cache(fmt, TOKENS // PAGE, PAGE, placement, seed=21)
    flat, p, s = _flat_bytes(cache), cache.shape[1], fmt.spec
    g = torch.Generator().manual_seed(22)
    codes = torch.arange(256, dtype=torch.uint8).repeat(2)
    for t in range(TOKENS):
        base, slot = (t // p) * cache.stride(0), t % p
        if fmt.placement(placement) == "block_split":
            data, scales = base + slot * s.data_bytes, base + p * s.data_bytes + slot * s.scale_bytes
        else:
            data = base + slot * s.bytes_per_token
            scales = data + {F.V41_FP8: 512, F.MODEL1_FP8: 576, F.V32_FP8: 512, F.V41_FP4: 256}[fmt]
        n_codes = {F.MODEL1_FP8: 448, F.V41_FP4: 256}.get(fmt, 512)
        flat[data:data + n_codes] = codes.roll(t)[:n_codes]
        if fmt is F.V41_FP4:  # E4M3 scales: every 8th code (+-0, a subnormal, +-256), one NaN group
            sc = torch.arange(0, 256, 8, dtype=torch.uint8).roll(5 * t)
            sc[1] = 0x01
            if t == NAN_SCALE_TOKEN:
                sc[2] = 0x7F
                sc[5] = 0xFF
            flat[scales:scales + 32] = sc
        elif fmt is F.V32_FP8:
            sc = torch.tensor([F32[(t + j) % 8] for j in range(4)], dtype=torch.float32)
            if t == NAN_SCALE_TOKEN:
                sc[1] = float("nan")
            flat[scales:scales + 16] = sc.view(torch.uint8)
        else:
            n = 16 if fmt is F.V41_FP8 else 7
            sc = torch.tensor(E8M0, dtype=torch.uint8).roll(3 * t)[:n]
            if t == NAN_SCALE_TOKEN:
                sc[2] = 0xFF
            flat[scales:scales + n] = sc
            if fmt is F.MODEL1_FP8:
                flat[scales + 7] = 0xFF  # the pad byte: never a scale
        if fmt in (F.MODEL1_FP8, F.V32_FP8):  # 64 BF16 RoPE dims: MODEL1 V dims 448..511, V3.2 K dims 512..575
            rope = torch.randn(64, generator=g).bfloat16()
            rope[7] = -0.0
            if t == NAN_ROPE_TOKEN:
                rope[5] = float("nan")
            at = data + (448 if fmt is F.MODEL1_FP8 else 528)
            flat[at:at + 128] = rope.view(torch.uint8)
    return cache


def _check(fmt: KVCacheFormat, placement=None):
    cache = _records(fmt, placement)
    idx = torch.full((TOKENS, 1, TOPK), -1, dtype=torch.int32)
    for t in range(TOKENS):
        idx[t, 0, (t * 9) % TOPK] = t  # both vector cores' halves of the step, different slots
    q = torch.zeros(TOKENS, 1, 16, fmt.d_qk, dtype=torch.bfloat16)
    if fmt is F.V32_FP8:
        q[..., 512:] = torch.randn(TOKENS, 1, 16, 64, generator=torch.Generator().manual_seed(23)).bfloat16()
    scopes = [KVScope(cache, fmt, fmt.placement(placement), idx, None)]
    if fmt is F.V41_FP4:  # an extra cache: the main one (V4.1 FP8) reads nothing
        main = make_cache(F.V41_FP8, 1, 2)
        scopes.insert(0, KVScope(main, F.V41_FP8, "interleaved", torch.full((TOKENS, 1, 64), -1, dtype=torch.int32),
                                 None))
    scale = fmt.d_qk ** -0.5
    out, lse = sparse_attn.sparse_decode(q, scopes, scale, 512, None, False)
    ref_out, ref_lse = reference.sparse_decode(q, scopes, scale, 512, None)
    k = flash_mla.dequantize_k_cache(cache, fmt, placement).view(-1, fmt.d_qk)[:TOKENS].nan_to_num(nan=0.0)
    assert torch.equal(ref_out[:, 0], k[:, None, :512].expand(TOKENS, 16, 512))
    # the cases are there: a zero group from the NaN scale, NaN codes, subnormal and -0 values
    group = {F.V41_FP8: 32, F.MODEL1_FP8: 64, F.V32_FP8: 128, F.V41_FP4: 16}[fmt]
    assert not k[NAN_SCALE_TOKEN, 2 * group if fmt is not F.V32_FP8 else group:][:group].any()
    if fmt is not F.V41_FP4:  # E2M1 x E4M3 products stay normal
        assert ((k[:, :512].abs() < 2.0 ** -126) & (k[:, :512] != 0)).any()
    assert (k[:, :512].view(torch.int16) == -32768).any()
    mismatch = (out != ref_out).flatten(1).any(-1)
    assert not mismatch.any(), f"dequantised V differs for tokens {mismatch.nonzero().flatten().tolist()}"
    assert_close(lse, ref_lse, DECODE_LSE, "lse")  # V3.2: the RoPE dims' logits
    return k


def test_v41_fp8_interleaved():
    _check(F.V41_FP8, "interleaved")


def test_v41_fp8_block_split():
    _check(F.V41_FP8, "block_split")


def test_model1():
    k = _check(F.MODEL1_FP8)
    assert k[NAN_ROPE_TOKEN, 448 + 5] == 0 and k[0, 448 + 7].view(torch.int16) == -32768


def test_v32():
    _check(F.V32_FP8)


def test_v41_fp4():
    _check(F.V41_FP4, "interleaved")
