"""DG_BACKEND=ascend on CPU tensors (deepjit's twin): the public MX GEMMs take packed UE8M0 scales where they lie.

Per-token casts' K-major rows (int32 words or int16 pairs) and DeepGEMM-Ascend's MN-major int16 pairs are read
by the kernels in place (``ascend.fp8_mx_gemm.mx_scales``): the call's output has the bits of the same call with
the FP32 scales they stand for (converted on the host, the other path), and the call runs no op outside its
kernel launch but views. Other packings (int32 MN-major, K not a multiple of 64) take the converting path."""
import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import deep_gemm
from deep_gemm import formats
from tests.deep_gemm.ascend._grouped import psum_ends

VIEW_OPS = frozenset({"aten.view", "aten.alias", "aten.detach", "aten.transpose", "aten.t", "aten.select", "aten.slice",
                      "aten._unsafe_view", "aten.as_strided", "aten.expand", "aten.unsqueeze", "aten.squeeze",
                      "aten.permute"})


def _exponents(shape, gen) -> torch.Tensor:
    """UE8M0 bytes per 32 K-elements, 2^-7 .. 2^6."""
    return torch.randint(120, 134, shape, generator=gen, dtype=torch.uint8)


def _forms(e: torch.Tensor) -> dict:
    """The scales the bytes ``e`` [.., MN, K/32] stand for, in each container a caller may hand over (words padded
    with exponent byte 0, as the packers pad)."""
    words = torch.nn.functional.pad(e, (0, -e.size(-1) % 4))
    k_major16 = words.view(torch.int16)[..., :-(-e.size(-1) // 2)]
    return {"fp32": torch.exp2(e.float() - 127),
            "int32": words.view(torch.int32),                                         # per-token casts' rows
            "int16": k_major16,
            "int16_mn": k_major16.transpose(-1, -2).contiguous().transpose(-1, -2),   # DeepGEMM-Ascend's ready form
            "int32_mn": words.view(torch.int32).transpose(-1, -2).contiguous().transpose(-1, -2)}   # converted


def _fp8(shape, gen) -> torch.Tensor:
    return (torch.randn(shape, generator=gen) * 4).to(torch.float8_e4m3fn)


def _fp4(shape, gen) -> torch.Tensor:
    return formats.pack_fp4_codes(torch.randint(0, 16, shape, generator=gen, dtype=torch.uint8))


FORMS = ["int32", "int16", "int16_mn", "int32_mn"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("b_kind,k", [("fp8", 384), ("fp4", 384), ("fp8", 352)])   # 352: K % 64 != 0
def test_dense(monkeypatch, form, b_kind, k):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    gen = torch.Generator().manual_seed(3)
    m, n = 40, 264
    a, b = _fp8((m, k), gen), (_fp8 if b_kind == "fp8" else _fp4)((n, k), gen)
    sfa, sfb = _forms(_exponents((m, k // 32), gen)), _forms(_exponents((n, k // 32), gen))
    want, d = torch.empty(m, n, dtype=torch.bfloat16), torch.empty(m, n, dtype=torch.bfloat16)
    deep_gemm.fp8_fp4_gemm_nt((a, sfa["fp32"]), (b, sfb["fp32"]), want, recipe=(1, 1, 32))
    deep_gemm.fp8_fp4_gemm_nt((a, sfa[form]), (b, sfb[form]), d, recipe=(1, 1, 32))
    assert torch.equal(d, want)


@pytest.mark.parametrize("form", FORMS)
def test_m_grouped_contiguous_and_masked(monkeypatch, form):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    gen = torch.Generator().manual_seed(4)
    g, m, n, k = 3, 192, 256, 256
    a, b = _fp8((m, k), gen), _fp4((g, n, k), gen)
    sfa, sfb = _forms(_exponents((m, k // 32), gen)), _forms(_exponents((g, n, k // 32), gen))
    ends = psum_ends([40, 0, 70], 64)
    want, d = torch.zeros(m, n, dtype=torch.bfloat16), torch.zeros(m, n, dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa["fp32"]), (b, sfb["fp32"]), want, ends, recipe=(1, 1, 32),
                                                   use_psum_layout=True)
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa[form]), (b, sfb[form]), d, ends, recipe=(1, 1, 32),
                                                   use_psum_layout=True)
    assert torch.equal(d, want)
    am, sfam = _fp8((g, 64, k), gen), _forms(_exponents((g, 64, k // 32), gen))
    masked = torch.tensor([64, 0, 17], dtype=torch.int32)
    want, d = torch.zeros(g, 64, n, dtype=torch.bfloat16), torch.zeros(g, 64, n, dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked((am, sfam["fp32"]), (b, sfb["fp32"]), want, masked, 64,
                                               recipe=(1, 1, 32))
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked((am, sfam[form]), (b, sfb[form]), d, masked, 64, recipe=(1, 1, 32))
    assert torch.equal(d, want)


class _Ops(TorchDispatchMode):
    """The aten ops run outside kernel launches, and the launched kernels' names."""

    def __init__(self):
        super().__init__()
        self.outside, self.kernels, self.launching = collections.Counter(), [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.launching:
            self.outside[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("form", ["int32", "int16_mn"])
def test_a_call_is_its_kernel(monkeypatch, form):
    """With packed scales in a form the kernels read, a dense call launches its kernel and runs nothing else but
    views: no unpacking, no re-packing, no look at the values (on an NPU: no op beside the GEMM)."""
    import deepjit.runtime
    monkeypatch.setenv("DG_BACKEND", "ascend")
    gen = torch.Generator().manual_seed(5)
    m, n, k = 32, 256, 256
    a, b = _fp8((m, k), gen), _fp8((n, k), gen)
    sfa, sfb = _forms(_exponents((m, k // 32), gen))[form], _forms(_exponents((n, k // 32), gen))[form]
    d = torch.empty(m, n, dtype=torch.bfloat16)
    deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d, recipe=(1, 1, 32))    # compiles the kernel
    ops, launch = _Ops(), deepjit.runtime.Runtime.launch

    def launch_recorded(runtime, kernel, *args):
        ops.kernels.append(kernel.name)
        ops.launching += 1
        try:
            return launch(runtime, kernel, *args)
        finally:
            ops.launching -= 1

    monkeypatch.setattr(deepjit.runtime.Runtime, "launch", launch_recorded)
    with ops:
        deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d, recipe=(1, 1, 32))
    assert ops.kernels == ["dg_fp8_mx_gemm"]
    assert set(ops.outside) <= VIEW_OPS, ops.outside
