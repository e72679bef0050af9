"""The public functions themselves (not only their ``torch.ops`` forms) under ``torch.compile(fullgraph=True)``:
Dynamo traces them without a graph break (fullgraph would raise) and the compiled call gives the eager
result bit for bit. Argument checks run inside the op at run time, so a bad argument still raises."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing.generators import generate_m_grouped_contiguous, generate_m_grouped_masked, generate_normal


def _compile(fn):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend="aot_eager")


def _same_as_eager(fn, *args):
    got, want = _compile(fn)(*args), fn(*args)
    for x, y in zip(got, want, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)


def test_fp8_gemm_nt_and_bf16_gemm_nt():
    fp8, bf16 = generate_normal(32, 64, 256), generate_normal(32, 64, 128, kind="bf16")

    def f(a0, a1, b0, b1, x, y):
        d8 = torch.empty(32, 64, dtype=torch.bfloat16)
        deep_gemm.fp8_gemm_nt((a0, a1), (b0, b1), d8)
        d16 = torch.empty(32, 64, dtype=torch.bfloat16)
        deep_gemm.bf16_gemm_nt(x, y, d16)
        return d8, d16
    _same_as_eager(f, *fp8.a, *fp8.b, bf16.a, bf16.b)


def test_grouped_forms_and_m_indices_keyword():
    case = generate_m_grouped_contiguous(2, 64, 64, 128)
    masked = generate_m_grouped_masked(2, 16, 8, 64, 128)

    def f(a0, a1, b0, b1, layout, ma0, ma1, mb0, mb1, masked_m):
        d = torch.empty(a0.shape[0], 64, dtype=torch.bfloat16)
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a0, a1), (b0, b1), d, m_indices=layout)
        dm = torch.zeros(2, 16, 64, dtype=torch.bfloat16)
        deep_gemm.fp8_m_grouped_gemm_nt_masked((ma0, ma1), (mb0, mb1), dm, masked_m=masked_m, expected_m=8)
        return d, dm
    _same_as_eager(f, *case.a, *case.b, case.grouped_layout, *masked.a, *masked.b, masked.masked_m)


def test_checks_still_run_in_the_compiled_call():
    case = generate_normal(32, 64, 256)

    def f(a0, a1, b0, b1):
        d = torch.empty(32, 64, dtype=torch.bfloat16)
        deep_gemm.fp8_gemm_nt((a0, a1), (b0, b1), d)
        return d
    with pytest.raises(ValueError, match="b\\[0\\]"):
        _compile(f)(*case.a, case.b[0][:, :128], case.b[1])
