"""Einsum (BF16 and FP8), the HC pre-norm GEMM and the head-splitting FP8 GEMM, on every backend where the
``backend`` fixture is taken (the Ascend twin included; its kernel-specific cases are in ascend/)."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.testing.generators import generate_normal, randn
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8
from deepjit.tilelang_route.conformance.atomics_sync import round_hf32

from ._kinds import fp8_kind


@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr"])
def test_bf16_einsum_batched_heads(expr):
    b, h, r, dd = 6, 4, 128, 64            # (h, r, d) = (128, 512, 128) scaled down
    x = randn(b, h, r) if expr.startswith("bhr") else randn(b, h, dd)
    w = randn(h, dd, r)
    out = torch.empty(*( (b, h, dd) if expr.endswith("bhd") else (b, h, r) ), dtype=torch.bfloat16)
    deep_gemm.einsum(expr, x, w, out)
    ref = torch.einsum(expr, x.float(), w.float())
    assert calc_diff(out, ref) < 1e-5


def _served_by_ascend(backend, op):
    """Under "ascend" the call reached the Ascend kernel (the fixture skips the case otherwise)."""
    assert backend != "ascend" or backend.served == [op]


@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr"])
@pytest.mark.parametrize("b,h,r,dd", [(1, 3, 40, 24), (7, 2, 130, 72), (33, 5, 64, 100), (130, 2, 200, 260)])
def test_bf16_einsum_ragged(backend, expr, b, h, r, dd):
    """MLA absorption forms on every path, sizes off every tile multiple (the host runs them as one masked
    grouped GEMM over head views, one of them MN-major; the last shape gives the Ascend cube two M and two N
    blocks with a K tail), rounded once into BF16."""
    x = randn(b, h, r) if expr.startswith("bhr") else randn(b, h, dd)
    w = randn(h, dd, r)
    out = torch.full((b, h, dd) if expr.endswith("bhd") else (b, h, r), float("nan"), dtype=torch.bfloat16)
    deep_gemm.einsum(expr, x, w, out)
    want = torch.einsum(expr, x.float(), w.float())
    assert calc_diff(out, want) < 1e-5
    torch.testing.assert_close(out.float(), want, rtol=8e-3, atol=1e-2)
    _served_by_ascend(backend, "bf16_einsum")


@pytest.mark.parametrize("shape", [(5, 64, 128, 64), (3, 20, 36, 50)])  # tile multiples; tails in M, N and K
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_bf16_einsum_bmk_bnk_mn(backend, out_dtype, shape):
    """The sum over b (on Ascend: in L0C); FP32 d accumulates in place (c = d)."""
    s, m, n, k = shape
    x, y = randn(s, m, k), randn(s, n, k)
    ref = torch.einsum("bmk,bnk->mn", x.float(), y.float())
    if out_dtype == torch.float32:
        d = torch.randn(m, n)
        ref = ref + d
        deep_gemm.einsum("bmk,bnk->mn", x, y, d, c=d)
    else:
        d = torch.empty(m, n, dtype=torch.bfloat16)
        deep_gemm.einsum("bmk,bnk->mn", x, y, d)
    assert calc_diff(d, ref) < (1e-10 if out_dtype == torch.float32 else 1e-5)
    if out_dtype == torch.bfloat16:
        torch.testing.assert_close(d.float(), ref, rtol=8e-3, atol=1e-2)
    _served_by_ascend(backend, "bf16_einsum")


def test_bf16_einsum_bhd_bhr_hdr_accumulates(backend):
    """MN-major x MN-major into FP32 d with c = d (on Ascend the FixPipe store adds to d)."""
    x, y = randn(37, 3, 40), randn(37, 3, 24)
    d = torch.randn(3, 40, 24)
    want = torch.einsum("bhd,bhr->hdr", x.float(), y.float()) + d
    deep_gemm.einsum("bhd,bhr->hdr", x, y, d, c=d)
    assert calc_diff(d, want) < 1e-10
    torch.testing.assert_close(d, want, rtol=1e-5, atol=1e-4)
    _served_by_ascend(backend, "bf16_einsum")


def _quant_tokens(x, use_ue8m0=False):      # per-token over the last dim of a [B, H, K] tensor -> SF [B, H, K/128]
    q, sf = per_token_cast_to_fp8(x.reshape(-1, x.size(-1)), use_ue8m0=use_ue8m0)
    return q.view(x.shape), sf.view(*x.shape[:-1], -1)


def test_fp8_einsum_bhr_hdr_bhd():
    b, h, r, dd = 8, 2, 256, 128
    x, w = randn(b, h, r), randn(h, dd, r)
    qa = _quant_tokens(x)
    blocks = [per_block_cast_to_fp8(w[i], use_ue8m0=False) for i in range(h)]
    qb = (torch.stack([p[0] for p in blocks]), torch.stack([p[1] for p in blocks]))
    d = torch.empty(b, h, dd, dtype=torch.bfloat16)
    deep_gemm.fp8_einsum("bhr,hdr->bhd", qa, qb, d)
    assert calc_diff(d, torch.einsum("bhr,hdr->bhd", x.float(), w.float())) < 1e-3


@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr"])
def test_fp8_einsum_ragged(backend, expr):
    ue8m0 = backend == "ascend"           # the Ascend MX scale unit takes powers of two only
    b, h, r, dd = 5, 3, 320, 72
    x = randn(b, h, r) if expr.startswith("bhr") else randn(b, h, dd)
    w = randn(h, dd, r)
    k_last = expr.startswith("bhr")       # the weight's K is its last dim (r) or its middle one (d)
    blocks = [per_block_cast_to_fp8(w[i] if k_last else w[i].T.contiguous(), use_ue8m0=ue8m0) for i in range(h)]
    qw = torch.stack([p[0] if k_last else p[0].T for p in blocks])
    sw = torch.stack([p[1] if k_last else p[1].T for p in blocks])
    out = torch.full((b, h, dd) if expr.endswith("bhd") else (b, h, r), float("nan"), dtype=torch.bfloat16)
    deep_gemm.fp8_einsum(expr, _quant_tokens(x, ue8m0), (qw, sw), out)
    assert calc_diff(out, torch.einsum(expr, x.float(), w.float())) < 1e-3


def test_fp8_einsum_bhd_bhr_hdr_accumulates(backend):
    b, h, dd, r = 256, 2, 64, 96
    x, y = randn(b, h, dd), randn(b, h, r)
    # scales per 128 rows of b (K) and per column (M/N): SF [B/128, H, D|R]
    def quant(t):
        q = torch.empty(t.shape, dtype=torch.float8_e4m3fn)
        sf = torch.empty(b // 128, h, t.size(-1))
        for i in range(h):
            qi, si = deep_gemm.per_channel_cast_to_fp8(t[:, i], use_ue8m0=backend == "ascend")
            q[:, i], sf[:, i] = qi, si
        return q, sf
    d = torch.randn(h, dd, r)
    ref = d + torch.einsum("bhd,bhr->hdr", x.float(), y.float())
    deep_gemm.fp8_einsum("bhd,bhr->hdr", quant(x), quant(y), d, c=d, recipe=(1, 1, 128))
    assert calc_diff(d, ref) < 1e-3


@pytest.mark.parametrize("m,n,k", [(13, 24, 640),     # (24, 7168) scaled down
                                   (7, 5, 37),        # ragged: row, column and K tails
                                   (1, 9, 4)])        # K shorter than the splits: an empty split
@pytest.mark.parametrize("num_splits", [None, 1, 3])
def test_tf32_hc_prenorm_gemm(backend, m, n, k, num_splits):
    a, b = randn(m, k), torch.randn(n, k)
    shape_d = (m, n) if num_splits is None else (num_splits, m, n)
    d, sqr = torch.empty(shape_d), torch.empty(shape_d[:-1])
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sqr, num_splits=num_splits)
    if num_splits is not None:
        d, sqr = d.sum(0), sqr.sum(0)
    if backend == "ascend":  # the Ascend cube rounds B to HF32 (10 mantissa bits) as upstream's MMA to TF32
        b = round_hf32(b, False)
    assert calc_diff(d, a.float() @ b.t()) < 1e-8
    assert calc_diff(sqr, a.float().square().sum(-1)) < 1e-8


def test_skip_head_mid(backend):
    left, mid, right = 32, 16, 32           # (128, 64, 128) scaled down
    case = generate_normal(64, 256, 256, fp8_kind(backend))
    heads = 256 // (left + right)
    d = torch.zeros(64, 256 + heads * mid, dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt_skip_head_mid(case.a, case.b, d, (left, mid, right), **case.kwargs)
    ref = case.ref_d.view(64, heads, left + right)
    expected = torch.cat([ref[:, :, :left], torch.zeros(64, heads, mid, dtype=ref.dtype), ref[:, :, left:]], dim=2)
    assert calc_diff(d, expected.view(64, -1)) < 1e-3
    assert bool((d.view(64, heads, -1)[:, :, left:left + mid] == 0).all())
