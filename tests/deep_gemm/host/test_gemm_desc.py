"""dg_gemm's named argument block: Python's ctypes GemmDesc against the C++ struct, field by field."""
import ctypes

from deep_gemm.host._lib import kernel
from deep_gemm.host.gemm_desc import GemmDesc, OperandDesc, layout


def _cpp_layout() -> dict[str, int]:
    buf = ctypes.create_string_buffer(4096)
    kernel("dg_gemm_desc_layout", "host/gemm_desc_layout.cpp")(ctypes.addressof(buf), len(buf))
    pairs = (item.split(":") for item in buf.value.decode().split(";") if item)
    return {name: int(offset) for name, offset in pairs}


def test_python_layout_matches_cpp():
    cpp = _cpp_layout()
    assert cpp.pop("sizeof") == ctypes.sizeof(GemmDesc) == 41 * 8
    assert cpp == layout()
    assert list(cpp) == list(layout())  # same order, so a field swap on one side is caught too


def test_layout_names_nested_fields():
    offsets = layout()
    assert offsets["a.type"] == 7 * 8 and offsets["b.type"] == offsets["a.type"] + ctypes.sizeof(OperandDesc)
    assert offsets["c.row_stride"] == ctypes.sizeof(GemmDesc) - 8
