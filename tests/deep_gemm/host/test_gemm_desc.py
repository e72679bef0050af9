"""dg_gemm's named argument block: the ctypes struct deepjit reads from host/gemm_desc.hpp against the
C++ compiler's layout, field by field, and filled by name (a field left out or unknown is refused)."""
import ctypes

import pytest

from deep_gemm._lib import LIB
from deep_gemm.host.gemm import GEMM_DESC
from deepjit import descriptors


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
