"""The package's deepjit library object for host kernels, and ``kernel()``, which adds sanitiser
flags when ``DG_HOST_SANITIZE`` asks for them."""
from __future__ import annotations

import os
from collections.abc import Mapping

from deepjit.backends.host import HostCompilerOptions

from .._lib import LIB


def kernel(name: str, relative_path: str, defines: Mapping[str, object] | None = None):
    """``LIB.host_kernel``, or with ``DG_HOST_SANITIZE=address`` (see tests/deep_gemm/host/run_asan.sh)
    the same source built with ``-fsanitize=address`` (the flags join the cache key)."""
    sanitize = os.environ.get("DG_HOST_SANITIZE", "")
    options = None
    if sanitize:
        options = HostCompilerOptions(optimize_level="1",
                                      extra_cxx_flags=(f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g"))
    return LIB.host_kernel(name, relative_path, defines, options)


def threads(num_threads) -> int:
    return LIB.num_threads if num_threads is None else int(num_threads)
