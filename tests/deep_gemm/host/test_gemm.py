"""Host GEMM kernels against float64 math on dequantised operands: every element type, all four
layouts through strided views, scale modes (power-of-two folded and FP32 promoted), ragged sizes,
grouped layouts and K-grouped accumulation."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deep_gemm import host as H
from tests.testkit import calc_diff

from .quant import cast_fp4, cast_fp8, dequant


def ref_gemm(a, b, c=None, alpha=1.0):
    out = alpha * (a @ b.T)
    return out if c is None else out + c.double()


def check(d, ref, tol):
    assert calc_diff(d.double(), ref) < tol
    if d.dtype == torch.float32:   # FP32 accumulation of exactly dequantised products
        torch.testing.assert_close(d.double(), ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())


def operand(kind, mn, k, gran, pow2):
    x = torch.randn(mn, k)
    if kind == "bf16":
        q = x.bfloat16()
        return q, None, dequant(q, None, gran)
    if kind == "fp8":
        q, sf = cast_fp8(x, gran, pow2)
        return q, sf, dequant(q, sf, gran)
    q, sf = cast_fp4(x, gran[1])
    return q, sf, dequant(q, sf, (1, gran[1]))


def layout(q, kind, mn_major):
    """The same logical [MN, K] operand stored MN-major (what the nn/tn/tt aliases hand in)."""
    if not mn_major:
        return q
    if kind == "fp4":   # packed along MN: [MN/2, K] with stride(0) == 1
        codes = torch.stack([(q & 0xF), (q >> 4)], -1).flatten(-2)   # [MN, K] nibble codes
        t = codes.T.contiguous()                                      # [K, MN]
        return (t[:, 0::2] | (t[:, 1::2] << 4)).to(torch.uint8).T   # [MN/2, K] view
    return q.T.contiguous().T


@pytest.mark.parametrize("m,n,k", [(1, 33, 128), (77, 100, 300), (130, 257, 384), (96, 64, 4096), (100, 96, 2210), (130, 40, 333)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_bf16_gemm(m, n, k, out_dtype):
    a, _, ar = operand("bf16", m, k, (1, 1), False)
    b, _, br = operand("bf16", n, k, (1, 1), False)
    d = torch.empty(m, n, dtype=out_dtype)
    H.gemm(a, None, b, None, d)
    check(d, ref_gemm(ar, br), 1e-5)


@pytest.mark.parametrize("a_mn,b_mn", [(False, False), (False, True), (True, True), (True, False)])
@pytest.mark.parametrize("pow2", [True, False])
@pytest.mark.parametrize("m,n,k", [(5, 40, 128), (150, 200, 320), (33, 129, 1000)])
def test_fp8_gemm_layouts(a_mn, b_mn, pow2, m, n, k):
    a, sfa, ar = operand("fp8", m, k, (1, 128), pow2)
    b, sfb, br = operand("fp8", n, k, (128, 128), pow2)
    d = torch.empty(m, n, dtype=torch.float32)
    H.gemm(layout(a, "fp8", a_mn), sfa, layout(b, "fp8", b_mn), sfb, d)
    check(d, ref_gemm(ar, br), 1e-6)


@pytest.mark.parametrize("kind,pow2", [("bf16", False), ("fp8", True), ("fp8", False)])
@pytest.mark.parametrize("m", [1, 3, 4, 6, 7, 8])
def test_decode_rows(kind, pow2, m):
    """Decode row counts (B streamed row by row where the CPU has the BF16 dot product: FP8 B to 6
    rows, BF16 B to 8; the panels past them): K and N tails (K not a multiple of the 64-value chunk,
    N not of the rows taken at a time), c and alpha."""
    n, k = 203, 456
    a, sfa, ar = operand(kind, m, k, (1, 128), pow2)
    b, sfb, br = operand(kind, n, k, (128, 128), pow2)
    c = torch.randn(m, n)
    d = torch.empty(m, n, dtype=torch.float32)
    H.gemm(a, sfa, b, sfb, d, c=c, alpha=0.5)
    check(d, ref_gemm(ar, br, c, 0.5), 1e-6)


@pytest.mark.parametrize("pow2", [True, False])
@pytest.mark.parametrize("m", [4, 12])
def test_few_rows_over_many_column_blocks(pow2, m):
    """Few FP8 rows against an N of many 64-column blocks (on brgemm a task runs several of them, the
    B scale changing every 128 columns, and prefetches across them) with N and K tails."""
    n, k = 1100, 456
    a, sfa, ar = operand("fp8", m, k, (1, 128), pow2)
    # B's scale blocks differ along N and K (randn alone gives every block the same power of two)
    gain = torch.exp2((torch.arange(n) // 128 % 4).float())[:, None] * torch.exp2((torch.arange(k) // 128 % 3).float())
    b, sfb = cast_fp8(torch.randn(n, k) * gain, (128, 128), pow2)
    br = dequant(b, sfb, (128, 128))
    d = torch.empty(m, n, dtype=torch.float32)
    H.gemm(a, sfa, b, sfb, d)
    check(d, ref_gemm(ar, br), 1e-6)


@pytest.mark.parametrize("kind,pow2", [("bf16", False), ("fp8", False)])
def test_decode_row_with_a_long_k(kind, pow2):
    """A decode row far longer than the K block the per-thread scratch is sized for (was a heap overflow:
    the row was converted whole into that scratch)."""
    m, n, k = 1, 16, 65536 + 64 + 8
    a, sfa, ar = operand(kind, m, k, (1, 128), pow2)
    b, sfb, br = operand(kind, n, k, (128, 128), pow2)
    d = torch.empty(m, n, dtype=torch.float32)
    H.gemm(a, sfa, b, sfb, d)
    check(d, ref_gemm(ar, br), 1e-6)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_fp8_gemm_c_alpha(out_dtype):
    m, n, k = 70, 90, 256
    a, sfa, ar = operand("fp8", m, k, (1, 128), False)
    b, sfb, br = operand("fp8", n, k, (128, 128), False)
    c = torch.randn(m, n).to(out_dtype)
    d = c.clone()
    H.gemm(a, sfa, b, sfb, d, c=d, alpha=-0.75)   # in place, c is d
    check(d, ref_gemm(ar, br, c, -0.75), 1e-5)


@pytest.mark.parametrize("kinds", [("fp8", "fp4"), ("fp4", "fp4"), ("bf16", "fp8")])
@pytest.mark.parametrize("mn_major", [False, True])
def test_mixed_precision(kinds, mn_major):
    m, n, k = 40, 96, 320
    ga = (1, 128) if kinds[0] == "fp8" else (1, 32)
    gb = (1, 32) if kinds[1] == "fp4" else (128, 128)
    a, sfa, ar = operand(kinds[0], m, k, ga, True)
    b, sfb, br = operand(kinds[1], n, k, gb, False)
    d = torch.empty(m, n, dtype=torch.float32)
    H.gemm(layout(a, kinds[0], mn_major), sfa, layout(b, kinds[1], mn_major), sfb, d, gran_a=ga, gran_b=gb)
    check(d, ref_gemm(ar, br), 1e-6)


def test_k_zero_gives_c_and_threads():
    a = torch.empty(4, 0, dtype=torch.bfloat16)
    b = torch.empty(6, 0, dtype=torch.bfloat16)
    c = torch.randn(4, 6)
    d = torch.full((4, 6), float("nan"))
    H.gemm(a, None, b, None, d, c=c)
    assert torch.equal(d, c)
    a, _, ar = operand("bf16", 200, 64, (1, 1), False)
    b, _, br = operand("bf16", 300, 64, (1, 1), False)
    outs = []
    for t in (1, 2, 3):
        d = torch.empty(200, 300)
        H.gemm(a, None, b, None, d, num_threads=t)
        outs.append(d)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])   # tiles are thread-independent


@pytest.mark.parametrize("psum", [False, True])
@pytest.mark.parametrize("nn", [False, True])
def test_m_grouped_contiguous(psum, nn):
    g, n, k, align = 4, 72, 256, 32
    sizes = [40, 0, 100, 7]
    starts, rows = [], 0
    for s in sizes:
        starts.append(rows)
        rows = -(-(rows + s) // align) * align
    m_sum = rows
    a, sfa, ar = operand("fp8", m_sum, k, (1, 128), False)
    bs = [operand("fp8", n, k, (128, 128), False) for _ in range(g)]
    b = torch.stack([x[0] for x in bs])
    sfb = torch.stack([x[1] for x in bs])
    if nn:
        b = b.transpose(1, 2).contiguous().transpose(1, 2)
    m_indices = torch.full((m_sum,), -1, dtype=torch.int32)
    for i, (s0, s) in enumerate(zip(starts, sizes, strict=True)):
        m_indices[s0:s0 + s] = i
    layout_ = torch.tensor([s0 + s for s0, s in zip(starts, sizes, strict=True)], dtype=torch.int32) if psum else m_indices
    d = torch.full((m_sum, n), 7.0, dtype=torch.bfloat16)
    H.m_grouped_gemm_contiguous(a, sfa, b, sfb, d, layout_, use_psum_layout=psum, alignment=align)
    for i, (s0, s) in enumerate(zip(starts, sizes, strict=True)):
        if s:
            assert calc_diff(d[s0:s0 + s].double(), ref_gemm(ar[s0:s0 + s], bs[i][2])) < 1e-5
    assert (d[m_indices < 0] == 0).all()


def test_m_grouped_masked():
    g, m_max, n, k = 3, 48, 64, 384
    masked = torch.tensor([48, 0, 13], dtype=torch.int32)
    ops = [operand("fp8", m_max, k, (1, 128), True) for _ in range(g)]
    bs = [operand("fp8", n, k, (128, 128), True) for _ in range(g)]
    a, sfa = torch.stack([o[0] for o in ops]), torch.stack([o[1] for o in ops])
    b, sfb = torch.stack([o[0] for o in bs]), torch.stack([o[1] for o in bs])
    d = torch.full((g, m_max, n), 5.0, dtype=torch.bfloat16)
    H.m_grouped_gemm_masked(a, sfa, b, sfb, d, masked)
    for i in range(g):
        r = int(masked[i])
        if r:
            assert calc_diff(d[i, :r].double(), ref_gemm(ops[i][2][:r], bs[i][2])) < 1e-5
        assert (d[i, r:] == 5.0).all()   # rows past masked_m are left alone


@pytest.mark.parametrize("m,n,ks", [(40, 56, [256, 0, 128, 384]), (130, 300, [100, 0, 2100, 77])],
                         ids=["few-rows", "tails"])
@pytest.mark.parametrize("kind,pow2", [("fp8", False), ("fp8", True), ("bf16", False)])
def test_k_grouped(m, n, ks, kind, pow2):
    """Few rows (B panels converted on the fly; c in place) and many (tails: M, N and each group's K
    off the tile and scale-block sizes, a group over 2048 K spanning several packed blocks, an empty
    group; c separate); FP8 scales folded (powers of two) or promoted per 128-K block."""
    g, total = len(ks), sum(ks)
    a = torch.randn(total, m)
    b = torch.randn(total, n)
    sfa_rows, sfb_rows, a_parts, b_parts, refs = [], [], [], [], []
    k0 = 0
    for kg in ks:
        xa, xb = a[k0:k0 + kg], b[k0:k0 + kg]
        if kind == "fp8":   # per-channel along K blocks of 128: quantise the transposed [MN, K] view
            qa, sa = cast_fp8(xa.T, (1, 128), pow2)
            qb, sb = cast_fp8(xb.T, (1, 128), pow2)
            refs.append(dequant(qa, sa, (1, 128)) @ dequant(qb, sb, (1, 128)).T)
            a_parts.append(qa.T)
            b_parts.append(qb.T)
            sfa_rows.append(sa.T)
            sfb_rows.append(sb.T)
        else:
            qa, qb = xa.bfloat16(), xb.bfloat16()
            refs.append(qa.double().T @ qb.double())
            a_parts.append(qa)
            b_parts.append(qb)
        k0 += kg
    qa = torch.cat(a_parts).contiguous()
    qb = torch.cat(b_parts).contiguous()
    sfa = torch.cat(sfa_rows).contiguous() if kind == "fp8" else None
    sfb = torch.cat(sfb_rows).contiguous() if kind == "fp8" else None
    c = torch.randn(g, m, n)
    in_place = m < 96
    d = c.clone() if in_place else torch.full_like(c, float("nan"))
    H.k_grouped_gemm(qa, sfa, qb, sfb, d, d if in_place else c, ks)
    for i in range(g):
        torch.testing.assert_close(d[i].double(), refs[i] + c[i].double(), rtol=1e-4, atol=1e-3)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 70), n=st.integers(1, 80), k=st.integers(1, 300), a_mn=st.booleans(), b_mn=st.booleans(),
       pow2=st.booleans(), threads=st.integers(1, 3))
def test_fp8_shapes_fuzz(m, n, k, a_mn, b_mn, pow2, threads):
    a, sfa, ar = operand("fp8", m, k, (1, 128), pow2)
    b, sfb, br = operand("fp8", n, k, (128, 128), pow2)
    d = torch.empty(m, n, dtype=torch.float32)
    H.gemm(layout(a, "fp8", a_mn), sfa, layout(b, "fp8", b_mn), sfb, d, num_threads=threads)
    check(d, ref_gemm(ar, br), 1e-6)
