"""Turning Python launch arguments into C values for device kernels (Ascend and CUDA).

Python has no static argument types, so the rule is explicit: a tensor is its device address
(8 bytes), a ctypes scalar (``ctypes.c_int32(3)``, ``ctypes.c_float(1.5)``) or a numpy scalar keeps
its own type. A plain ``int`` or ``float`` takes the kernel's declared parameter type where the kernel
knows it (``params.py``: a ``float`` parameter gets a 4-byte float); otherwise a plain ``int`` is an
``int64`` and a plain ``float`` a ``double``.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .params import POINTER, SCALARS

_NUMPY_CTYPES = {np.dtype(k): v for k, v in (
    ("int8", ctypes.c_int8), ("int16", ctypes.c_int16), ("int32", ctypes.c_int32), ("int64", ctypes.c_int64),
    ("uint8", ctypes.c_uint8), ("uint16", ctypes.c_uint16), ("uint32", ctypes.c_uint32), ("uint64", ctypes.c_uint64),
    ("float32", ctypes.c_float), ("float64", ctypes.c_double), ("bool", ctypes.c_bool))}


def _declared(index: int, value, declared: str):
    """A plain Python ``int``/``float`` as the declared parameter type."""
    if declared == POINTER:
        if isinstance(value, int) and value >= 0:
            return ctypes.c_void_p(value)
        raise TypeError(f"argument {index}: expected a pointer (the kernel declares one), got {type(value).__name__} "
                        f"{value!r}")
    ctype = SCALARS.get(declared)
    if ctype is None:
        raise TypeError(f"argument {index}: expected a ctypes or numpy scalar of the declared {declared!r}, got "
                        f"{type(value).__name__} {value!r}")
    if ctype in (ctypes.c_float, ctypes.c_double):
        return ctype(value)
    if isinstance(value, float):
        raise TypeError(f"argument {index}: expected an int for the declared {declared!r}, got float {value!r}")
    bits = 8 * ctypes.sizeof(ctype)
    signed = ctype(-1).value == -1 if ctype is not ctypes.c_bool else False
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not low <= value <= high:
        raise ValueError(f"argument {index}: expected a value that fits the declared {declared!r}, got {value}")
    return ctype(value)


def declared_kinds(declared: list[str] | None, count: int) -> list:
    """Per argument its declared kind, or None throughout when the declaration is unknown or names
    another number of parameters (a declaration this parser misread must not break a typed call)."""
    return list(declared) if declared is not None and len(declared) == count else [None] * count


def to_ctype(index: int, value, declared: str | None = None):
    """The ctypes value passed for argument ``index`` (``declared``: the kernel's parameter kind, if known)."""
    if isinstance(value, ctypes._SimpleCData):
        return value
    if hasattr(value, "data_ptr") and hasattr(value, "device"):  # a torch tensor
        return ctypes.c_void_p(value.data_ptr())
    if isinstance(value, np.generic):
        ctype = _NUMPY_CTYPES.get(value.dtype)
        if ctype is None:
            raise TypeError(f"argument {index}: expected a numpy scalar of a supported type, got {value.dtype}")
        return ctype(value.item())
    if isinstance(value, bool):
        raise TypeError(f"argument {index}: expected ctypes.c_bool or an int of the kernel's width for a bool, got "
                        f"{value!r}")
    if declared is not None and isinstance(value, (int, float)):
        return _declared(index, value, declared)
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise ValueError(f"argument {index}: expected a value that fits in int64, got {value}")
        return ctypes.c_int64(value)
    if isinstance(value, float):
        return ctypes.c_double(value)
    if value is None:
        return ctypes.c_void_p(None)
    raise TypeError(f"argument {index}: expected a tensor, an int, a float, a numpy scalar or a ctypes scalar, "
                    f"got {type(value).__name__}")


def pack_ascend_args(args, declared: list[str] | None = None) -> bytes:
    """One host buffer: each value at an offset aligned to max(4, its alignment), total rounded up
    to 8 and never empty (zero-argument launches still send 8 bytes). ``declared``: the kernel's
    parameter kinds (``params.declared_types``), None when unknown."""
    buf = bytearray()
    for i, (arg, kind) in enumerate(zip(args, declared_kinds(declared, len(args)), strict=True)):
        value = to_ctype(i, arg, kind)
        align = max(4, ctypes.alignment(value))
        buf += b"\0" * (-len(buf) % align)
        buf += bytes(value)
    buf += b"\0" * (-len(buf) % 8)
    return bytes(buf) or b"\0" * 8
