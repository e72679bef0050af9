"""deep_gemm's Ascend fp8_einsum (deep_gemm/ascend/fp8_einsum.py: the masked MX kernel with every batch full)
on deepjit's Ascend twin, through the public op with DG_BACKEND=ascend, against the reference path on the same
quantised inputs (power-of-two scales, the Ascend MX contract): both compute exact FP32 products of the
dequantised operands, so calc_diff stays far below upstream's 1e-3 (here 1e-5, BF16 output rounding).

One case per expression (three kernel variants: K-major x K-major, K-major x MN-major, MN-major x MN-major
accumulating into FP32 d with c = d), plus bhr,hdr->bhd at a second shape class (two M and two N blocks, a K
tail past one 128 block) and with vLLM's 2-D [H*D, R] weight."""
import pytest
import torch

import deep_gemm
from deep_gemm import _dispatch
from deep_gemm.testing import calc_diff


def _quantised(shape, sf_shape):
    data = (torch.randn(shape) * 4).to(torch.float8_e4m3fn)
    return data, torch.exp2(torch.randint(-4, 5, sf_shape).float())


def _cdiv(a, b):
    return -(-a // b)


CASES = [  # expr, recipe, (B, H, D, R), 2-D weight
    ("bhr,hdr->bhd", (1, 128, 128), (5, 3, 40, 130), False),
    ("bhr,hdr->bhd", (1, 128, 128), (130, 2, 260, 200), True),
    ("bhd,hdr->bhr", (1, 128, 128), (5, 3, 130, 40), False),
    ("bhd,bhr->hdr", (1, 1, 128), (150, 3, 40, 24), False),
]


@pytest.mark.parametrize(("expr", "recipe", "dims", "flat_weight"), CASES)
def test_fp8_einsum_matches_the_reference_path(monkeypatch, expr, recipe, dims, flat_weight):
    bb, h, dd, r = dims
    _, gm_n, gk = recipe
    if expr == "bhr,hdr->bhd":
        a, b = _quantised((bb, h, r), (bb, h, _cdiv(r, gk))), _quantised((h, dd, r), (h, _cdiv(dd, gm_n), _cdiv(r, gk)))
        d = torch.empty(bb, h, dd, dtype=torch.bfloat16)
        if flat_weight:
            b = (b[0].flatten(0, 1), b[1].flatten(0, 1))
    elif expr == "bhd,hdr->bhr":
        a, b = _quantised((bb, h, dd), (bb, h, _cdiv(dd, gk))), _quantised((h, dd, r), (h, _cdiv(dd, gk), _cdiv(r, gm_n)))
        d = torch.empty(bb, h, r, dtype=torch.bfloat16)
    else:
        a, b = _quantised((bb, h, dd), (_cdiv(bb, gk), h, dd)), _quantised((bb, h, r), (_cdiv(bb, gk), h, r))
        d = torch.zeros(h, dd, r)
    monkeypatch.setenv("DG_BACKEND", "reference")
    if expr == "bhd,bhr->hdr":  # c = d of the product's magnitude, so a lost accumulation shows
        deep_gemm.fp8_einsum(expr, a, b, d, c=d, recipe=recipe)
        d = torch.randn(h, dd, r) * float(d.abs().mean())
    want = d.clone()
    deep_gemm.fp8_einsum(expr, a, b, want, c=want if expr == "bhd,bhr->hdr" else None, recipe=recipe)
    monkeypatch.setenv("DG_BACKEND", "ascend")
    served = []
    monkeypatch.setattr(_dispatch.TABLE, "run", lambda name, device, *args: served.append(
        _dispatch.TABLE.serves(name, device, *args)) or type(_dispatch.TABLE).run(_dispatch.TABLE, name, device, *args))
    deep_gemm.fp8_einsum(expr, a, b, d, c=d if expr == "bhd,bhr->hdr" else None, recipe=recipe)
    assert served == ["ascend"]
    assert calc_diff(d, want) < 1e-5


@pytest.mark.parametrize(("dtype", "in_place"), [(torch.float32, False), (torch.bfloat16, False),
                                                 (torch.bfloat16, True)])
def test_c_accumulates_on_the_ascend_kernel(monkeypatch, dtype, in_place):
    """``d = a b + c`` with c a tensor of its own (FP32 d: d starts as c, the products add onto it) or, with a
    BF16 d, also c = d (the sum formed in FP32 and rounded once)."""
    a = _quantised((5, 3, 130), (5, 3, 2))
    b = _quantised((3, 40, 130), (3, 1, 2))
    monkeypatch.setenv("DG_BACKEND", "reference")
    product = torch.empty(5, 3, 40, dtype=dtype)
    deep_gemm.fp8_einsum("bhr,hdr->bhd", a, b, product)
    c = (torch.randn(5, 3, 40) * float(product.float().abs().mean())).to(dtype)  # of the product's size
    c_before = c.clone()
    want = torch.empty(5, 3, 40, dtype=dtype)
    deep_gemm.fp8_einsum("bhr,hdr->bhd", a, b, want, c=c)
    monkeypatch.setenv("DG_BACKEND", "ascend")
    d = c if in_place else torch.full((5, 3, 40), float("nan"), dtype=dtype)
    served = []
    monkeypatch.setattr(_dispatch.TABLE, "run", lambda name, device, *args: served.append(
        _dispatch.TABLE.serves(name, device, *args)) or type(_dispatch.TABLE).run(_dispatch.TABLE, name, device, *args))
    deep_gemm.fp8_einsum("bhr,hdr->bhd", a, b, d, c=c)
    assert served == ["ascend"]
    if not in_place:
        assert torch.equal(c, c_before)
    assert calc_diff(d, want) < 1e-5 and calc_diff(d, product) > 1e-2
    if dtype == torch.bfloat16:  # rounded once, as the reference: bf16(bf16(ab) + c) would differ in ~30 %
        assert (d != want).float().mean() < 0.01
