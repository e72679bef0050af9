"""DG_BACKEND=ascend on CPU tensors: the public ops reach the Ascend kernels through deep_gemm's
backend table (run on deepjit's Ascend twin) and match the reference; forms without an Ascend
kernel are served by the reference."""
import torch

import deep_gemm
from deep_gemm import _dispatch, reference
from deep_gemm.testing import calc_diff


def test_bf16_gemm_nt_runs_the_ascend_kernel(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    a, b = torch.randn(100, 200).bfloat16(), torch.randn(72, 200).bfloat16()
    d = torch.empty(100, 72, dtype=torch.float32)
    assert _dispatch.TABLE.serves("bf16_gemm_nt", a.device, a, b, d, None, None) == "ascend"
    deep_gemm.bf16_gemm_nt(a, b, d)
    want = torch.empty_like(d)
    reference.bf16_gemm_nt(a, b, want, None, None)
    assert calc_diff(d, want) < 1e-5


def test_every_op_with_an_ascend_kernel_is_in_the_table():
    served = {e.name for e in _dispatch.TABLE if e.ascend is not None}
    assert served == {"bf16_gemm_nt", "fp8_fp4_gemm_nt", "m_grouped_bf16_gemm_nt", "k_grouped_bf16_gemm_tn",
                      "mqa_logits", "paged_mqa_logits"}
