"""Host tf32_hc_prenorm_gemm kernel against float64 math: ragged tiles (rows, columns, K tails),
K blocks, split-K partials including an empty split, padded output rows and strided operands."""
import pytest
import torch

from deep_gemm import host as H


def expected(a, b, num_splits):
    a64, b64 = a.double(), b.double()
    if num_splits is None:
        return a64 @ b64.T, (a64 * a64).sum(-1)
    k = a.size(1)
    chunk = -(-k // num_splits)
    parts = [(min(k, i * chunk), min(k, (i + 1) * chunk)) for i in range(num_splits)]
    return (torch.stack([a64[:, s:e] @ b64[:, s:e].T for s, e in parts]),
            torch.stack([(a64[:, s:e] ** 2).sum(-1) for s, e in parts]))


@pytest.mark.parametrize("m,n,k", [(50, 24, 600), (4, 7, 15), (97, 17, 300)])
@pytest.mark.parametrize("num_splits", [None, 2, 5])
def test_matches_float64(m, n, k, num_splits):
    a = torch.randn(m, k + 8).bfloat16()[:, 4:k + 4]        # row stride k + 8
    b = torch.randn(n, k + 3)[:, :k]
    lead = () if num_splits is None else (num_splits,)
    d = torch.full(lead + (m, n + 5), float("nan"))[..., :n]   # padded rows, padding untouched
    if num_splits is not None:
        d = d.contiguous()
    sqr = torch.full(lead + (m,), float("nan"))
    H.hc_prenorm_gemm(a, b, d, sqr, num_splits)
    ref_d, ref_sqr = expected(a, b, num_splits)
    torch.testing.assert_close(d.double(), ref_d, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(sqr.double(), ref_sqr, rtol=1e-5, atol=1e-4)
    if num_splits is None:
        assert torch.isnan(d.as_strided((m, 5), (n + 5, 1), n)).all()
