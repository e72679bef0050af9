"""The package's deepjit library object for host kernels, and ``kernel()``, which adds sanitiser
flags when ``DG_HOST_SANITIZE`` asks for them."""
from __future__ import annotations

import functools
import os
from collections.abc import Mapping

from deepjit.backends.host import HostCompilerOptions, matrix_engine

from .._lib import LIB


def kernel(name: str, relative_path: str, defines: Mapping[str, object] | None = None, engine: str | None = None):
    """``LIB.host_kernel``, on matrix engine ``engine`` where given (else the process's), or with
    ``DG_HOST_SANITIZE=address`` (see tests/deep_gemm/host/run_asan.sh) the same source built with
    ``-fsanitize=address`` (the flags join the cache key)."""
    sanitize = os.environ.get("DG_HOST_SANITIZE", "")
    options = None
    if sanitize:
        options = HostCompilerOptions(optimize_level="1", matrix_engine=engine,
                                      extra_cxx_flags=(f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g"))
    elif engine is not None:
        options = _engine_options(engine)
    return LIB.host_kernel(name, relative_path, defines, options)


@functools.cache
def _engine_options(engine: str) -> HostCompilerOptions:
    return HostCompilerOptions(matrix_engine=engine)


def process_engine() -> tuple[str, bool]:
    """The matrix engine this process's host kernels are built on (the host runtime's default options), and
    whether it is not the automatic choice: forced by ``DG_HOST_MATRIX`` / ``DJ_HOST_MATRIX``, or set in those
    options by hand."""
    runtime = LIB.host_runtime
    engine, choice = runtime.default_compiler_options.matrix_engine, runtime.backend.matrix
    return engine, choice.source is not None or engine != choice.engine


@functools.cache
def brgemm_links() -> bool:
    return matrix_engine.brgemm_missing() is None


def threads(num_threads) -> int:
    return LIB.num_threads if num_threads is None else int(num_threads)
