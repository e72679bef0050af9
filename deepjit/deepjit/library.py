"""What a kernel library needs from deepjit, in one object per library.

    LIB = deepjit.KernelLibrary("deep_gemm", "DG", __file__, __version__)
    kernel = LIB.host_kernel("fp8_gemm", "host/fp8_gemm.cpp", {"BLOCK_K": 128})
    kernel(d, a, b, ..., LIB.num_threads)

- one lazily created host runtime (nothing is touched before the first compile);
- host sources are files inside the package; ``#include <pkg/...>`` headers of the package and
  ``<deepjit/host/...>`` headers are tracked in the cache key; defines are injected as text;
- the backend for a device: ``<PREFIX>_BACKEND=reference|host|ascend`` forces one; otherwise CPU
  tensors take the host kernels (the reference, with one warning, when no C++ compiler works)
  and NPU tensors the Ascend kernels where the library has them, else the reference;
- the worker-thread count host kernels use (``set_num_sms`` and friends map onto it).
"""
from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Mapping

from .config import Config
from .env import Env
from .errors import DeepJITError, ToolchainNotFoundError
from .runtime import Runtime, create_lazy_jit

BACKEND_NAMES = ("reference", "host", "ascend")
_CPU_COUNT = os.cpu_count() or 1  # read once: os.cpu_count() costs microseconds per call


class KernelLibrary:
    def __init__(self, name: str, env_prefix: str, package_file: str, version: str):
        self.name = name
        self.package_dir = os.path.dirname(os.path.abspath(package_file))
        self.env = Env(env_prefix)
        self.config = Config(self.package_dir, env_prefix, extra_signature=f"{name}-{version}",
                             include_dirs=[os.path.dirname(self.package_dir)], include_prefixes=[f"{name}/"])
        self._host = create_lazy_jit(self.config, "host")
        self._kernels: dict = {}
        self._sources: dict[str, str] = {}
        self._lock = threading.Lock()
        self._host_error: Exception | None = None
        self._warned = False
        self._num_threads: int | None = None

    # ---- threads ----------------------------------------------------------------------------------
    @property
    def num_threads(self) -> int:
        if self._num_threads is not None:
            return self._num_threads
        return self.env.get_int("NUM_THREADS", None) or _CPU_COUNT

    def set_num_threads(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError(f"num_sms / thread count must be a positive int, got {n!r}")
        self._num_threads = n

    # ---- backend choice ---------------------------------------------------------------------------
    def forced_backend(self) -> str | None:
        name, value = self.env.lookup("BACKEND")
        if name is None or value == "":
            return None
        if value not in BACKEND_NAMES:
            raise ValueError(f"{name} must be one of {', '.join(BACKEND_NAMES)}, got {value!r}")
        return value

    def host_available(self) -> bool:
        if self._host_error is None and not self._host.initialized:
            try:
                self._host.get()
            except ToolchainNotFoundError as exc:
                self._host_error = exc
        return self._host_error is None

    def backend_for(self, device, has_ascend: bool = False) -> str:
        """Which implementation serves tensors on ``device`` ("reference", "host" or "ascend")."""
        forced = self.forced_backend()
        kind = getattr(device, "type", device)
        if forced is not None:
            if forced == "host" and kind != "cpu":
                raise ValueError(f"{self.env.prefix}_BACKEND=host needs CPU tensors, got device {device}")
            if forced == "ascend" and kind != "npu":
                raise ValueError(f"{self.env.prefix}_BACKEND=ascend needs NPU tensors, got device {device}")
            return forced
        if kind == "cpu":
            if self.host_available():
                return "host"
            if not self._warned:
                self._warned = True
                warnings.warn(f"{self.name}: no working C++ compiler ({self._host_error}); "
                              f"using the slower reference path", RuntimeWarning, stacklevel=3)
            return "reference"
        if kind == "npu" and has_ascend:
            return "ascend"
        return "reference"

    # ---- host kernels -----------------------------------------------------------------------------
    @property
    def host_runtime(self) -> Runtime:
        return self._host.get()

    def source(self, relative_path: str) -> str:
        text = self._sources.get(relative_path)
        if text is None:
            path = os.path.join(self.package_dir, relative_path)
            try:
                with open(path) as f:
                    text = f.read()
            except OSError as exc:
                raise DeepJITError(f"{self.name}: cannot read host kernel source {path}: {exc}") from None
            self._sources[relative_path] = text
        return text

    def host_kernel(self, name: str, relative_path: str, defines: Mapping[str, object] | None = None,
                    options=None):
        """The kernel ``name`` from the package file ``relative_path``, with ``#define``s prepended
        and optional ``HostCompilerOptions`` (e.g. sanitiser flags; they join the cache key).

        Memoised per (name, file, defines, options and the runtime's current default options, which
        may be edited in place) so the hot path is one dict lookup."""
        runtime = self.host_runtime
        memo = (name, relative_path, tuple(sorted((defines or {}).items())),
                None if options is None else options.memo_token(), runtime.default_compiler_options.memo_token())
        kernel = self._kernels.get(memo)
        if kernel is None:
            prelude = "".join(f"#define {k} {_define_value(v)}\n" for k, v in memo[2])
            kernel = runtime.compile(name, prelude + self.source(relative_path), options)
            with self._lock:
                self._kernels[memo] = kernel
        return kernel


def _define_value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str) and v and "\n" not in v:
        return v
    raise DeepJITError(f"define value must be a bool, number or one-line string, got {v!r}")
