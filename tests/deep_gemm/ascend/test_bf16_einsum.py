"""deep_gemm's Ascend BF16 einsum (deep_gemm/ascend/bf16_einsum.*) on deepjit's Ascend twin, through the public
op with DG_BACKEND=ascend, against a float32 torch.einsum at upstream's BF16 tolerance (calc_diff 1e-5; the FP32
accumulating forms 1e-10).

Every expression of einsum.BF16_EXPRS runs as a batched cube GEMM over views of the tensors at their strides
(K-major and MN-major operands). Kernel variants are compiled per operand majors and output mode, so the
cases share three compiles: K-major x K-major into BF16 (bhr,hdr->bhd at two shape classes -- one tile with
tails, and two M blocks x two N blocks with a K tail past one 128 block -- and bmk,bnk->mn, whose sum over b
runs in L0C), K-major x MN-major into BF16 (bhd,hdr->bhr), MN-major x MN-major accumulating into FP32 d
(bhd,bhr->hdr with c = d, the FixPipe store adding to d)."""
import pytest
import torch

import deep_gemm
from deep_gemm import _dispatch
from deep_gemm.testing import calc_diff

CASES = [  # expr, a, b, d shapes, accumulate (c = d, FP32 d)
    ("bhr,hdr->bhd", (5, 3, 24), (3, 40, 24), (5, 3, 40), False),
    ("bhr,hdr->bhd", (130, 2, 200), (2, 260, 200), (130, 2, 260), False),
    ("bmk,bnk->mn", (3, 20, 50), (3, 36, 50), (20, 36), False),
    ("bhd,hdr->bhr", (5, 3, 40), (3, 40, 24), (5, 3, 24), False),
    ("bhd,bhr->hdr", (37, 3, 40), (37, 3, 24), (3, 40, 24), True),
]


@pytest.mark.parametrize(("expr", "sa", "sb", "sd", "accumulate"), CASES)
def test_bf16_einsum_matches_the_reference(monkeypatch, expr, sa, sb, sd, accumulate):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    a, b = torch.randn(sa).bfloat16(), torch.randn(sb).bfloat16()
    d = torch.randn(sd) if accumulate else torch.empty(sd, dtype=torch.bfloat16)
    c = d if accumulate else None
    want = torch.einsum(expr, a.float(), b.float()) + (d if accumulate else 0)
    assert _dispatch.TABLE.serves("bf16_einsum", a.device, expr, a, b, d, c) == "ascend"
    deep_gemm.einsum(expr, a, b, d, c=c)
    assert calc_diff(d, want) < (1e-10 if accumulate else 1e-5)
    tol = dict(rtol=1e-5, atol=1e-4) if accumulate else dict(rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(d.float(), want, **tol)
