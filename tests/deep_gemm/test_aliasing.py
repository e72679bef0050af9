"""Caller-given outputs that overlap an input or themselves are refused before any write, naming
both tensors; the in-place forms upstream defines (``c`` is ``d``) still work."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing.generators import generate_m_grouped_masked, generate_normal
from deep_gemm.testing.numeric import calc_diff


def _sharing(t: torch.Tensor, rows: int, cols: int):
    """A copy of ``t`` (same strides) and an FP32 [rows, cols] tensor whose first element is its last."""
    span = sum((s - 1) * st for s, st in zip(t.shape, t.stride(), strict=True)) + 1
    storage = torch.zeros(span - 1 + rows * cols, dtype=t.dtype)
    copy = storage.as_strided(t.shape, t.stride()).copy_(t)
    return copy, storage[span - 1:].view(rows, cols), storage


def test_fp8_gemm_d_sharing_storage_with_sfb(backend):
    case = generate_normal(8, 16, 128, "fp8")
    sfb, d, storage = _sharing(case.b[1].float(), 8, 16)
    before = storage.clone()
    with pytest.raises(ValueError, match=r"d: expected memory disjoint from b\[1\], got d overlapping b\[1\]"):
        deep_gemm.fp8_gemm_nt(case.a, (case.b[0], sfb), d)
    assert torch.equal(storage, before)


def test_bf16_gemm_d_with_zero_strides(backend):
    a, b = torch.randn(8, 64).bfloat16(), torch.randn(16, 64).bfloat16()
    with pytest.raises(ValueError, match="d: expected an output whose elements do not overlap, got strides \\(0, 1\\)"):
        deep_gemm.bf16_gemm_nt(a, b, torch.zeros(1, 16).expand(8, 16))


def test_bf16_gemm_d_overlapping_a(backend):
    storage = torch.randn(8 * 64 + 8 * 16).bfloat16()
    a, b = storage[:8 * 64].view(8, 64), torch.randn(16, 64).bfloat16()
    with pytest.raises(ValueError, match="d: expected memory disjoint from a"):
        deep_gemm.bf16_gemm_nt(a, b, storage[8 * 64 - 16:8 * 64 - 16 + 8 * 16].view(8, 16))


def test_c_is_d_still_accumulates_in_place(backend):
    case = generate_normal(8, 16, 64, "bf16", accumulate=True, out_dtype=torch.float32)
    d = case.c.clone()
    deep_gemm.bf16_gemm_nt(case.a, case.b, d, c=d)
    assert calc_diff(d, case.ref_d) < 1e-5


def test_masked_d_overlapping_a(backend):
    case = generate_m_grouped_masked(2, 16, 8, 32, 128, "bf16")
    d = case.a.view(-1)[:2 * 16 * 32].view(2, 16, 32)
    with pytest.raises(ValueError, match="d: expected memory disjoint from a, got d overlapping a"):
        deep_gemm.m_grouped_bf16_gemm_nt_masked(case.a, case.b, d, case.masked_m, case.expected_m)
