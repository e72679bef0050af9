"""dg_gemm's named argument block: the ctypes struct deepjit reads from host/gemm_desc.hpp against the
C++ compiler's layout, field by field, and filled by name (a field left out or unknown is refused)."""
import ctypes

import pytest
import torch

from deep_gemm import host as H
from deep_gemm._lib import LIB
from deep_gemm.host.gemm import GEMM_DESC
from deepjit import descriptors
from tests.testkit import calc_diff


def test_python_layout_matches_cpp():
    checked = descriptors.check_host_layout(LIB, "host/gemm_desc.hpp", "dg::GemmDesc")
    assert checked is GEMM_DESC and ctypes.sizeof(GEMM_DESC) == 41 * 8


def test_layout_names_nested_fields():
    offsets = {f: off for f, off, _ in descriptors.layout(GEMM_DESC)}
    operand = ctypes.sizeof(type(GEMM_DESC().a))
    assert offsets["a.type"] == 7 * 8 and offsets["b.type"] == offsets["a.type"] + operand
    assert offsets["c.row_stride"] == ctypes.sizeof(GEMM_DESC) - 8


def test_fields_are_filled_by_name():
    output = dict(type=0, group_stride=0, row_stride=8)
    with pytest.raises(TypeError, match="GemmDesc: missing a, b"):
        descriptors.pack(GEMM_DESC, m=1, n=1, k=1, groups=1, mode=0, alignment=1, zero_padding=0, d=output, c=output)


def test_cached_descriptors_follow_every_field():
    """Descriptors are reused by their field values: calls that differ in one nested field (b's row
    stride, the output's type, c present or not) each get their own, whatever ran before."""
    torch.manual_seed(0)
    m, n, k = 4, 40, 192   # n and k: tails of the 64-column block and the 128-value scale block
    a = torch.randn(m, k).bfloat16()
    wide = torch.randn(n, k + 64).bfloat16()
    b_tight, b_strided = wide[:, :k].contiguous(), wide[:, :k]
    c = torch.randn(m, n)
    for b in (b_tight, b_strided, b_tight):
        for out_dtype in (torch.float32, torch.bfloat16):
            for with_c in (False, True):
                d = torch.empty(m, n, dtype=out_dtype)
                H.gemm(a, None, b, None, d, c=c if with_c else None)
                ref = a.double() @ b.double().T + (c.double() if with_c else 0)
                assert calc_diff(d.double(), ref) < 1e-5
