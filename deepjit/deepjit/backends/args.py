"""Turning Python launch arguments into C values for device kernels (Ascend and CUDA).

Python has no static argument types, so the rule is explicit: a tensor is its device address
(8 bytes), a ctypes scalar (``ctypes.c_int32(3)``, ``ctypes.c_float(1.5)``) or a numpy scalar keeps
its own type, a plain ``int`` is an ``int64`` and a plain ``float`` a ``double``.
"""
from __future__ import annotations

import ctypes

import numpy as np

_NUMPY_CTYPES = {np.dtype(k): v for k, v in (
    ("int8", ctypes.c_int8), ("int16", ctypes.c_int16), ("int32", ctypes.c_int32), ("int64", ctypes.c_int64),
    ("uint8", ctypes.c_uint8), ("uint16", ctypes.c_uint16), ("uint32", ctypes.c_uint32), ("uint64", ctypes.c_uint64),
    ("float32", ctypes.c_float), ("float64", ctypes.c_double), ("bool", ctypes.c_bool))}


def to_ctype(index: int, value):
    """The ctypes value passed for argument ``index``."""
    if isinstance(value, ctypes._SimpleCData):
        return value
    if hasattr(value, "data_ptr") and hasattr(value, "device"):  # a torch tensor
        return ctypes.c_void_p(value.data_ptr())
    if isinstance(value, np.generic):
        ctype = _NUMPY_CTYPES.get(value.dtype)
        if ctype is None:
            raise TypeError(f"argument {index}: unsupported numpy scalar type {value.dtype}")
        return ctype(value.item())
    if isinstance(value, bool):
        raise TypeError(f"argument {index}: pass a bool as ctypes.c_bool or an int of the kernel's width")
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise ValueError(f"argument {index} = {value} does not fit in int64")
        return ctypes.c_int64(value)
    if isinstance(value, float):
        return ctypes.c_double(value)
    if value is None:
        return ctypes.c_void_p(None)
    raise TypeError(f"argument {index}: expected a tensor, an int, a float, a numpy scalar or a ctypes scalar, "
                    f"got {type(value).__name__}")


def pack_ascend_args(args) -> bytes:
    """One host buffer: each value at an offset aligned to max(4, its alignment), total rounded up
    to 8 and never empty (zero-argument launches still send 8 bytes)."""
    buf = bytearray()
    for i, arg in enumerate(args):
        value = to_ctype(i, arg)
        align = max(4, ctypes.alignment(value))
        buf += b"\0" * (-len(buf) % align)
        buf += bytes(value)
    buf += b"\0" * (-len(buf) % 8)
    return bytes(buf) or b"\0" * 8
