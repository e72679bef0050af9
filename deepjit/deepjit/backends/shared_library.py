"""A vendor runtime library (ACL, the CUDA driver) opened through ctypes on first use, once per process."""
from __future__ import annotations

import ctypes
import threading

from ..errors import DeepJITError, ToolchainNotFoundError


class SharedLibrary:
    """``lib()`` opens ``name`` (then runs ``init(cdll)``) the first time and returns the same handle
    after; a missing library is a ``ToolchainNotFoundError`` naming ``what`` it is."""

    def __init__(self, name: str, what: str, init=None):
        self.name, self.what, self.init = name, what, init
        self._lib = None
        self._lock = threading.Lock()

    def __call__(self) -> ctypes.CDLL:
        with self._lock:
            if self._lib is None:
                try:
                    lib = ctypes.CDLL(self.name, mode=ctypes.RTLD_LOCAL)
                except OSError as exc:
                    raise ToolchainNotFoundError(f"cannot load {self.name} ({self.what}): {exc}") from None
                if self.init is not None:
                    self.init(lib)
                self._lib = lib
            return self._lib

    def available(self) -> bool:
        """Whether the library opens (and initialises)."""
        try:
            self()
            return True
        except DeepJITError:
            return False
