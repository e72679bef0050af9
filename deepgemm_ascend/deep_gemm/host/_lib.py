"""The deepjit library object host kernels compile through (the package's own when it has one),
and ``kernel()``, which adds sanitiser flags when ``DG_HOST_SANITIZE`` asks for them."""
from __future__ import annotations

import os
from collections.abc import Mapping

import deepjit
from deepjit.backends.host import HostCompilerOptions

try:  # the package module owns LIB once the public API defines it
    from .. import LIB
except ImportError:
    LIB = deepjit.KernelLibrary("deep_gemm", "DG", os.path.join(os.path.dirname(os.path.dirname(__file__)), "__init__.py"),
                                "0.1.0")

_SANITIZED: dict = {}


def kernel(name: str, relative_path: str, defines: Mapping[str, object] | None = None):
    """``LIB.host_kernel``, or with ``DG_HOST_SANITIZE=address`` (see tests/deep_gemm/host/run_asan.sh)
    the same source built with ``-fsanitize=address`` (the flags join the cache key)."""
    sanitize = os.environ.get("DG_HOST_SANITIZE", "")
    if not sanitize:
        return LIB.host_kernel(name, relative_path, defines)
    memo = (name, relative_path, tuple(sorted((defines or {}).items())), sanitize)
    k = _SANITIZED.get(memo)
    if k is None:
        prelude = "".join(f"#define {key} {int(v) if isinstance(v, bool) else v}\n" for key, v in memo[2])
        options = HostCompilerOptions(optimize_level="1", extra_cxx_flags=(f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g"))
        k = _SANITIZED[memo] = LIB.host_runtime.compile(name, prelude + LIB.source(relative_path), options)
    return k


def threads(num_threads) -> int:
    return LIB.num_threads if num_threads is None else int(num_threads)
