"""Loading a host shared object and calling its one kernel through ctypes (GIL released)."""
from __future__ import annotations

import ctypes
import os
import threading

from ...elf import STT_FUNC, expect_one_kernel, exported_symbols
from ...errors import DeepJITError

SIGNATURE_SUFFIX = "__dj_signature"
ERROR_SYMBOL = "dj_kernel_error"     # deepjit/host/kernel.hpp: the message of a failed launch
_CTYPES = {
    "ptr": ctypes.c_void_p,
    "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32, "i64": ctypes.c_int64,
    "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64,
    "f32": ctypes.c_float, "f64": ctypes.c_double,
}
_INT_RANGES = {t: (-(1 << (b - 1)), (1 << (b - 1)) - 1) for t, b in (("i8", 8), ("i16", 16), ("i32", 32), ("i64", 64))}
_INT_RANGES.update({t: (0, (1 << b) - 1) for t, b in (("u8", 8), ("u16", 16), ("u32", 32), ("u64", 64))})


def discover_kernels(so_path: str) -> list[str]:
    """A kernel is an exported function ``name`` with an exported ``name__dj_signature`` string."""
    symbols = exported_symbols(so_path)
    return sorted(n[: -len(SIGNATURE_SUFFIX)] for n in symbols
                  if n.endswith(SIGNATURE_SUFFIX) and symbols.get(n[: -len(SIGNATURE_SUFFIX)]) == STT_FUNC)


def parse_signature(sig: str, name: str) -> list[str]:
    types = [t.strip() for t in sig.split(",")] if sig.strip() else []
    for t in types:
        if t not in _CTYPES:
            raise DeepJITError(f"kernel {name}: unknown argument type {t!r} in signature {sig!r}")
    return types


class HostKernel:
    def __init__(self, path: str):
        so = os.path.join(path, "kernel.so")
        if not os.path.isfile(so):
            raise DeepJITError(f"missing host binary: {so}")
        self.path = path
        self.name = expect_one_kernel(discover_kernels(so), so)
        self._lib = ctypes.CDLL(so, mode=os.RTLD_LOCAL | os.RTLD_NOW)  # CDLL calls release the GIL
        sig = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(self._lib, self.name + SIGNATURE_SUFFIX))).decode()
        self.arg_types = parse_signature(sig, self.name)
        self._fn = getattr(self._lib, self.name)
        self._fn.argtypes = [_CTYPES[t] for t in self.arg_types]
        self._fn.restype = None
        try:   # libraries built without deepjit/host/kernel.hpp's error buffer report nothing
            self._error = (ctypes.c_char * 1024).in_dll(self._lib, ERROR_SYMBOL)
        except ValueError:
            self._error = None
        # The error buffer is one per loaded kernel: two threads launching it at once would see each
        # other's error (and a worker stops on any), so launches of one kernel are serialised.
        self._launch_lock = threading.Lock() if self._error is not None else None

    def _convert(self, i: int, kind: str, value):
        if kind == "ptr":
            if hasattr(value, "data_ptr") and hasattr(value, "device"):  # a torch tensor (torch is not imported here)
                if value.device.type != "cpu":
                    raise TypeError(f"kernel {self.name}: argument {i}: expected a CPU tensor, got device {value.device}")
                return value.data_ptr()
            if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
                return value
            raise TypeError(f"kernel {self.name}: argument {i}: expected a tensor, an address or None, "
                            f"got {type(value).__name__}")
        if kind[0] in "iu":
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"kernel {self.name}: argument {i}: expected an int ({kind}), got {type(value).__name__}")
            lo, hi = _INT_RANGES[kind]
            if not lo <= value <= hi:
                raise ValueError(f"kernel {self.name}: argument {i}: expected a value in [{lo}, {hi}] ({kind}), got {value}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"kernel {self.name}: argument {i}: expected a float ({kind}), got {type(value).__name__}")
        return float(value)

    def launch(self, options, *args):
        if self._fn is None:
            raise DeepJITError("kernel must be loaded before launch")
        if len(args) != len(self.arg_types):
            raise TypeError(f"kernel {self.name}: expected {len(self.arg_types)} arguments "
                            f"({', '.join(self.arg_types)}), got {len(args)}")
        converted = [self._convert(i, k, a) for i, (k, a) in enumerate(zip(self.arg_types, args, strict=True))]
        if self._launch_lock is None:
            self._fn(*converted)
            return
        with self._launch_lock:
            self._fn(*converted)
            if self._error[0] == b"\0":
                return
            message = self._error.value.decode(errors="replace")
            self._error[0] = b"\0"
        raise DeepJITError(f"kernel {self.name} failed: {message}")

    def __call__(self, *args):
        self.launch(None, *args)

    def __repr__(self):
        return f"HostKernel({self.name}({', '.join(self.arg_types)}) @ {self.path})"
