"""M-grouped host GEMMs with the few rows per expert of an MoE decode step: ragged groups of 1-15
rows (exact-height tiles), empty groups, 16+ rows and multiples of 32 (the other paths) side by
side, against float64 math on the dequantised operands. Covers folded (power-of-two) and promoted
scales, per-block and per-row weight scales (the table conversion and its fallback), K tails that
end inside a 64-value chunk or a 32-value one, N not a multiple of the 32-column panels."""
import pytest
import torch

from deep_gemm import host as H
from tests.testkit import calc_diff

from .quant import cast_fp8, dequant

SIZES = [1, 0, 15, 7, 0, 12, 3, 16, 33, 9, 32, 2]   # rows per group, in order


def _weights(g, n, k, gran_b, pow2, kind):
    if kind == "bf16":
        b = torch.randn(g, n, k).bfloat16()
        return b, None, [b[i].double() for i in range(g)]
    qs = [cast_fp8(torch.randn(n, k), gran_b, pow2) for _ in range(g)]
    b, sfb = torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])
    return b, sfb, [dequant(q, s, gran_b) for q, s in qs]


@pytest.mark.parametrize("psum", [False, True])
@pytest.mark.parametrize("pow2", [True, False])
@pytest.mark.parametrize("n,k,gran_b,kind", [(72, 256, (128, 128), "fp8"), (40, 352, (128, 128), "fp8"),
                                             (33, 200, (1, 128), "fp8"), (64, 160, None, "bf16")])
def test_contiguous_small_ragged_groups(psum, pow2, n, k, gran_b, kind):
    g, align = len(SIZES), 16
    starts, rows = [], 0
    for s in SIZES:
        starts.append(rows)
        rows = -(-(rows + s) // align) * align
    a, sfa = cast_fp8(torch.randn(rows, k), (1, 128), pow2)
    ar = dequant(a, sfa, (1, 128))
    b, sfb, brs = _weights(g, n, k, gran_b, pow2, kind)
    m_indices = torch.full((rows,), -1, dtype=torch.int32)
    for i, (s0, s) in enumerate(zip(starts, SIZES, strict=True)):
        m_indices[s0:s0 + s] = i
    layout = torch.tensor([s0 + s for s0, s in zip(starts, SIZES, strict=True)], dtype=torch.int32) if psum else m_indices
    if kind == "bf16":   # BF16 weights against FP8 activations: the B-side conversion is a plain copy
        a, sfa, ar = ar.bfloat16(), None, ar.bfloat16().double()
    outs = []
    for threads in (1, 2):
        d = torch.full((rows, n), 7.0, dtype=torch.float32)
        H.m_grouped_gemm_contiguous(a, sfa, b, sfb, d, layout, use_psum_layout=psum, alignment=align,
                                    gran_b=gran_b or (128, 128), num_threads=threads)
        outs.append(d)
    d = outs[0]
    assert torch.equal(outs[0], outs[1])   # tiles do not depend on the thread count
    for i, (s0, s) in enumerate(zip(starts, SIZES, strict=True)):
        if s:
            ref = ar[s0:s0 + s] @ brs[i].T
            torch.testing.assert_close(d[s0:s0 + s].double(), ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())
    assert (d[m_indices < 0] == 0).all()


@pytest.mark.parametrize("pow2", [True, False])
def test_masked_small_ragged_groups(pow2):
    masked = torch.tensor([0, 1, 5, 15, 0, 11, 16, 14], dtype=torch.int32)
    g, m_max, n, k = masked.numel(), 16, 96, 384
    acts = [cast_fp8(torch.randn(m_max, k), (1, 128), pow2) for _ in range(g)]
    a, sfa = torch.stack([q for q, _ in acts]), torch.stack([s for _, s in acts])
    b, sfb, brs = _weights(g, n, k, (128, 128), pow2, "fp8")
    d = torch.full((g, m_max, n), 5.0, dtype=torch.bfloat16)
    H.m_grouped_gemm_masked(a, sfa, b, sfb, d, masked)
    for i in range(g):
        r = int(masked[i])
        if r:
            ref = dequant(*acts[i], (1, 128))[:r] @ brs[i].T
            assert calc_diff(d[i, :r].double(), ref) < 1e-5
        assert (d[i, r:] == 5.0).all()   # masked rows are never written


def test_bf16_weights_with_an_odd_group_stride():
    """32 rows per group take the path that reads plain BF16 weight rows in place as 32-bit words
    (4-byte aligned rows only); an odd group stride (an as_strided view) misaligns every other
    group's rows by 2 bytes: the result must not change."""
    g, m, n, k = 3, 32, 40, 128
    a = torch.randn(g, m, k).bfloat16()
    store = torch.randn(g * (n * k + 1) + 1).bfloat16()
    b = store.as_strided((g, n, k), (n * k + 1, k, 1))
    d = torch.empty(g, m, n, dtype=torch.bfloat16)
    H.m_grouped_gemm_masked(a, None, b, None, d, torch.full((g,), m, dtype=torch.int32))
    for i in range(g):
        assert calc_diff(d[i].double(), a[i].double() @ b[i].double().T) < 1e-5
