"""The named argument block of ``dg_gemm``: ctypes mirrors of ``gemm_desc.hpp`` (all int64, no
padding). ``tests/deep_gemm/host/test_gemm_desc.py`` checks every field's offset against the
kernel's own ``dg_gemm_desc_layout``."""
from __future__ import annotations

import ctypes

_I64 = ctypes.c_int64


class OperandDesc(ctypes.Structure):
    _fields_ = [(name, _I64) for name in (
        "type", "group_stride", "mn_stride", "k_stride", "packed_mn", "sf_group_stride", "sf_mn_stride",
        "sf_k_stride", "gran_mn", "gran_k", "has_sf", "sf_groups", "sf_rows", "sf_cols")]


class OutputDesc(ctypes.Structure):
    _fields_ = [("type", _I64), ("group_stride", _I64), ("row_stride", _I64)]


class GemmDesc(ctypes.Structure):
    _fields_ = [(name, _I64) for name in ("m", "n", "k", "groups", "mode", "alignment", "zero_padding")] + [
        ("a", OperandDesc), ("b", OperandDesc), ("d", OutputDesc), ("c", OutputDesc)]


def layout(struct: type[ctypes.Structure] = GemmDesc, prefix: str = "", base: int = 0) -> dict[str, int]:
    """``{"a.type": offset, ...}`` for every scalar field, nested names joined with dots."""
    out = {}
    for name, ctype in struct._fields_:
        offset = base + getattr(struct, name).offset
        if issubclass(ctype, ctypes.Structure):
            out.update(layout(ctype, f"{prefix}{name}.", offset))
        else:
            out[f"{prefix}{name}"] = offset
    return out
