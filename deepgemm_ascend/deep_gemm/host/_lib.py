"""The deepjit library object host kernels compile through (the package's own when it has one)."""
from __future__ import annotations

import os

import deepjit

try:  # the package module owns LIB once the public API defines it
    from .. import LIB
except ImportError:
    LIB = deepjit.KernelLibrary("deep_gemm", "DG", os.path.join(os.path.dirname(os.path.dirname(__file__)), "__init__.py"),
                                "0.1.0")


def threads(num_threads) -> int:
    return LIB.num_threads if num_threads is None else int(num_threads)
