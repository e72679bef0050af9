"""Host MQA logits (plain and paged) against float64 math on dequantised inputs."""
import pytest
import torch

from deep_gemm import host as H
from tests.testkit import assert_bitwise_equal

from .quant import cast_fp4, dequant


def fp8_kv(s_kv, d):
    x = torch.randn(s_kv, d)
    sf = x.abs().amax(1).clamp(min=1e-4) / 448.0
    q = (x / sf[:, None]).to(torch.float8_e4m3fn)
    return q, sf, q.double() * sf.double()[:, None]


def fp4_rows(x):
    """[R, D] -> (uint8 [R, D/2], FP32 [R, D/32], float64 [R, D])."""
    q, sf = cast_fp4(x, 32)
    return q, sf, dequant(q, sf, (1, 32))


def ref_logits(qd, kvd, w, ks, ke, width, compressed):
    """qd [S, H, D], kvd [S_kv, D] float64 -> [S, width] with -inf outside the ranges (uncompressed)."""
    scores = torch.einsum("shd,jd->shj", qd, kvd).clamp(min=0)
    full = (scores * w.double()[:, :, None]).sum(1)
    out = torch.full((qd.size(0), width), float("-inf"), dtype=torch.float64)
    for i in range(qd.size(0)):
        lo, hi = int(ks[i]), int(ke[i])
        if compressed:
            out[i, :hi - lo] = full[i, lo:hi]
        else:
            out[i, lo:hi] = full[i, lo:hi]
    return out


def ranges(s, s_kv):
    ks = torch.randint(0, s_kv // 2, (s,), dtype=torch.int32)
    ke = torch.minimum(ks + torch.randint(0, s_kv, (s,), dtype=torch.int32), torch.tensor(s_kv, dtype=torch.int32))
    return ks, ke


@pytest.mark.parametrize("fmt", ["fp8", "fp4"])
@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("h,d", [(16, 128), (8, 64), (5, 64)])
def test_mqa_logits(fmt, compressed, h, d):
    s, s_kv = 37, 301
    if fmt == "fp8":
        qx = torch.randn(s, h, d)
        q = qx.to(torch.float8_e4m3fn)
        q_sf, qd = None, q.double()
        kv, kv_sf, kvd = fp8_kv(s_kv, d)
    else:
        q, q_sf, qd = fp4_rows(torch.randn(s * h, d))
        q, q_sf, qd = q.view(s, h, d // 2), q_sf.view(s, h, d // 32), qd.view(s, h, d)
        kv, kv_sf, kvd = fp4_rows(torch.randn(s_kv, d))
    w = torch.randn(s, h)
    ks, ke = ranges(s, s_kv)
    width = 320 if compressed else s_kv
    logits = torch.full((s, width + 16), 3.0)[:, :width]
    H.mqa_logits(q, q_sf, kv, kv_sf, w, ks, ke, logits, compressed=compressed, clean_logits=not compressed)
    ref = ref_logits(qd, kvd, w, ks, ke, width, compressed)
    valid = torch.isfinite(ref)
    torch.testing.assert_close(logits.double()[valid], ref[valid], rtol=1e-4, atol=1e-3)
    if compressed:
        assert (logits[~valid] == 3.0).all()   # columns past ke - ks untouched
    else:
        assert torch.isneginf(logits[~valid]).all()
    again = torch.full_like(logits, 3.0)
    H.mqa_logits(q, q_sf, kv, kv_sf, w, ks, ke, again, compressed=compressed, clean_logits=not compressed)
    assert_bitwise_equal(again, logits)


def build_cache(kv_bytes, kv_scale_bytes, block_kv, num_blocks, perm):
    """Pages [num_blocks, block_kv, 1, row + 4]: the page's values first, then one 4-byte scale per token."""
    row = kv_bytes.size(1)
    cache = torch.zeros(num_blocks, block_kv * (row + 4), dtype=torch.uint8)
    for logical, phys in enumerate(perm.tolist()):
        tok = slice(logical * block_kv, (logical + 1) * block_kv)
        cache[phys, :block_kv * row] = kv_bytes[tok].reshape(-1)
        cache[phys, block_kv * row:] = kv_scale_bytes[tok].reshape(-1)
    return cache.view(num_blocks, block_kv, 1, row + 4)


@pytest.mark.parametrize("fmt", ["fp8", "fp4"])
@pytest.mark.parametrize("next_n", [1, 2])
@pytest.mark.parametrize("h,block_kv", [(16, 64), (12, 16)])
def test_paged_mqa_logits(fmt, next_n, h, block_kv):
    b, d, max_blocks = 3, 128, 4
    ctx = torch.randint(1, max_blocks * block_kv, (b, next_n), dtype=torch.int32)
    num_blocks = b * max_blocks
    perm = torch.randperm(num_blocks)
    block_table = perm.view(b, max_blocks).to(torch.int32).contiguous()
    tokens = num_blocks * block_kv
    if fmt == "fp8":
        kv, kv_sf, kvd = fp8_kv(tokens, d)
        kv_bytes, sc_bytes = kv.view(torch.uint8), kv_sf.view(torch.uint8).view(tokens, 4)
        q = torch.randn(b, next_n, h, d).to(torch.float8_e4m3fn)
        q_sf, qd = None, q.double()
    else:
        kv_bytes, kv_sf, kvd = fp4_rows(torch.randn(tokens, d))
        exps = ((kv_sf.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)   # UE8M0 bytes, one int32 per token
        sc_bytes = exps.view(tokens, d // 32)
        qb, q_sf, qd = fp4_rows(torch.randn(b * next_n * h, d))
        q, q_sf, qd = qb.view(b, next_n, h, d // 2), q_sf.view(b, next_n, h, d // 32), qd.view(b, next_n, h, d)
    # Token of logical position p of batch row i lives in page block_table[i, p // block_kv].
    cache = build_cache(kv_bytes, sc_bytes, block_kv, num_blocks, torch.arange(num_blocks))  # page L = tokens of L
    w = torch.randn(b * next_n, h)
    width = max_blocks * block_kv
    logits = torch.full((b * next_n, width), 3.0)
    H.paged_mqa_logits(q, q_sf, cache, w, ctx, block_table, logits, clean_logits=True)
    for i in range(b):
        pages = block_table[i].long()
        kv_i = kvd.view(num_blocks, block_kv, d)[pages].reshape(-1, d)
        for t in range(next_n):
            r = i * next_n + t
            n = int(ctx[i, t])
            ref = ref_logits(qd.view(b, next_n, h, d)[i, t][None], kv_i, w[r][None], [0], [n], width, False)[0]
            torch.testing.assert_close(logits[r, :n].double(), ref[:n], rtol=1e-4, atol=1e-3)
            assert torch.isneginf(logits[r, n:]).all()
