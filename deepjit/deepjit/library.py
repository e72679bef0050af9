"""What a kernel library needs from deepjit, in one object per library.

    LIB = deepjit.KernelLibrary("deep_gemm", "DG", __file__, __version__)
    kernel = LIB.host_kernel("fp8_gemm", "host/fp8_gemm.cpp", {"BLOCK_K": 128})
    kernel(d, a, b, ..., LIB.num_threads)

- one lazily created host runtime (nothing is touched before the first compile);
- host sources are files inside the package; ``#include <pkg/...>`` headers of the package and
  ``<deepjit/host/...>`` headers are tracked in the cache key; defines are injected as text;
- the backend for a device: ``<PREFIX>_BACKEND=reference|host|ascend`` forces one (``ascend`` with
  CPU tensors runs the library's Ascend kernels on deepjit's Ascend CPU twin); otherwise CPU
  tensors take the host kernels (the reference, with one warning, when no C++ compiler works)
  and NPU tensors the Ascend kernels where the library has them, else the reference;
- Ascend kernels (``ascend_kernel``): a package ``.asc`` source or a TileLang PrimFunc, compiled by
  the Ascend toolchain for NPU tensors and by the twin for CPU tensors, launched alike;
  ``tilelang_kernel(builder, *args)`` takes a PrimFunc builder instead and caches its lowering on
  disk, so a process whose kernels are all cached never imports TileLang;
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
        self._ascend = {"ascend": create_lazy_jit(self.config, "ascend"),
                        "ascend_twin": create_lazy_jit(self.config, "ascend_twin")}
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
            raise ValueError(f"num_sms: expected a positive int (the thread count), got {n!r}")
        self._num_threads = n

    # ---- backend choice ---------------------------------------------------------------------------
    def forced_backend(self) -> str | None:
        name, value = self.env.lookup("BACKEND")
        if name is None or value == "":
            return None
        if value not in BACKEND_NAMES:
            raise ValueError(f"{name}: expected one of {', '.join(BACKEND_NAMES)}, got {value!r}")
        return value

    def host_available(self) -> bool:
        if self._host_error is None and not self._host.initialized:
            try:
                self._host.get()
            except ToolchainNotFoundError as exc:
                self._host_error = exc
        return self._host_error is None

    def backend_for(self, device, has_ascend: bool = False, op: str | None = None) -> str:
        """Which implementation serves tensors on ``device`` ("reference", "host" or "ascend").

        ``<PREFIX>_BACKEND=ascend`` takes the Ascend kernel on NPU tensors and the Ascend twin on CPU
        tensors; an op without one (``has_ascend=False``) raises instead of falling back."""
        forced = self.forced_backend()
        kind = getattr(device, "type", device)
        if forced is not None:
            if forced == "host" and kind != "cpu":
                raise ValueError(f"{self.env.prefix}_BACKEND: expected a backend for device {device} (host needs CPU "
                                 f"tensors), got 'host'")
            if forced == "ascend":
                if kind not in ("npu", "cpu"):
                    raise ValueError(f"{self.env.prefix}_BACKEND: expected a backend for device {device} (ascend "
                                     f"needs NPU tensors, or CPU tensors for the Ascend twin), got 'ascend'")
                if not has_ascend:
                    raise NotImplementedError(f"{self.env.prefix}_BACKEND=ascend: {self.name} has no Ascend kernel "
                                              f"for {op or 'this op'}")
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

    def ascend_runtime(self, twin: bool) -> Runtime:
        """The Ascend toolchain's runtime (``twin=False``) or the Ascend CPU twin's."""
        return self._ascend["ascend_twin" if twin else "ascend"].get()

    def ascend_kernel(self, name: str, relative_path, defines: Mapping[str, object] | None = None,
                      options=None) -> AscendKernelHandle:
        """The Ascend kernel ``name`` from the package file ``relative_path`` (``#define``s prepended) or
        from a TileLang PrimFunc (``defines`` must then be empty; its grid becomes the default block
        count). Compiled on first launch: by the Ascend toolchain for NPU tensors, by the twin for CPU
        tensors. ``options`` are the chosen toolchain's compiler options."""
        is_primfunc = hasattr(relative_path, "buffer_map")
        if is_primfunc and defines:
            raise ValueError(f"defines: expected none for a TileLang PrimFunc (they apply to package sources), got {defines!r}")
        if not is_primfunc and not isinstance(relative_path, str):
            raise TypeError(f"relative_path: expected a package-relative path or a TileLang PrimFunc, "
                            f"got {type(relative_path).__name__}")
        if is_primfunc:
            import tvm
            key = ("primfunc", tvm.ir.structural_hash(relative_path))
        else:
            key = relative_path
        memo = ("ascend", name, key, tuple(sorted((defines or {}).items())), None if options is None else options.memo_token())
        handle = self._kernels.get(memo)
        if handle is None:
            if is_primfunc:
                from .tilelang_route.twin import kernel_param_names, lower_with_grid
                lowered, grid = lower_with_grid(relative_path)
                source = lowered.source
            else:
                grid = None
                source = "".join(f"#define {k} {_define_value(v)}\n" for k, v in memo[3]) + self.source(relative_path)
            params = kernel_param_names(relative_path) if is_primfunc else None
            handle = AscendKernelHandle(self, name, source, grid, options, params)
            with self._lock:
                self._kernels[memo] = handle
        return handle

    def tilelang_kernel(self, builder, *args, options=None) -> AscendKernelHandle:
        """The TileLang Ascend kernel ``builder(*args)`` returns (a PrimFunc) like ``ascend_kernel``, its
        lowering taken from deepjit's disk cache when there (no TileLang import, builder not called; see
        ``tilelang_route.lowering_cache``). ``args`` are hashable and named fully by their ``repr``."""
        memo = ("tilelang", builder, args, None if options is None else options.memo_token())
        handle = self._kernels.get(memo)
        if handle is None:
            from .disk_cache import DiskCache
            from .tilelang_route.lowering_cache import cached_lowering

            lowered = cached_lowering(builder, *args, disk_cache=DiskCache.from_env(self.env))
            handle = AscendKernelHandle(self, lowered.symbol, lowered.source, lowered.grid, options, lowered.params,
                                        lowered.dims, lowered.specs)
            with self._lock:
                self._kernels[memo] = handle
        return handle

    def run_tilelang(self, builder, args: tuple, *tensors) -> None:
        """Launches the TileLang kernel ``builder(*args)`` (see ``tilelang_kernel``) on ``tensors``, in the
        PrimFunc's parameter order, with the grid its lowering gives."""
        self.tilelang_kernel(builder, *args).launch(None, *tensors)

    def num_cube_cores(self, device) -> int:
        """The cube-core count of the chip that runs tensors on ``device`` (the twin's for CPU tensors): what
        persistent grids are sized by."""
        twin = getattr(device, "type", str(device).split(":")[0]) != "npu"
        return self.ascend_runtime(twin).device.get_num_cube_cores()

    def num_vector_cores(self, device) -> int:
        """The vector-core count of the chip that runs tensors on ``device`` (the twin's for CPU tensors)."""
        twin = getattr(device, "type", str(device).split(":")[0]) != "npu"
        return self.ascend_runtime(twin).device.get_num_vec_cores()

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


class AscendKernelHandle:
    """One Ascend kernel of a library; ``launch(options, *args)`` takes ``AscendLaunchOptions`` and
    the kernel's arguments like ``AscendKernel.launch``, and runs on the twin when the tensor
    arguments are CPU tensors, on the NPU when they are NPU tensors. A TileLang kernel takes its
    tensors in the PrimFunc's parameter order (``params``: their names, mapped onto the lowered kernel's);
    its symbolic dimensions (``dims``, see ``tilelang_route.dims``) are read off their shapes, and a ``grid``
    formula in them gives the default block count; every launch checks the tensors against ``specs``
    (``tilelang_route.twin.tensor_specs``: rank, static extents, dtype, contiguity)."""

    def __init__(self, library: KernelLibrary, name: str, source: str, grid: int | str | None, options,
                 params: tuple[str, ...] | None = None, dims=(), specs=()):
        self.library, self.name, self.source, self.grid, self.options = library, name, source, grid, options
        self.params, self.dims, self.specs = params, dims, specs
        self._compiled: dict[bool, object] = {}

    def kernel(self, twin: bool):
        """The compiled kernel for the twin or the NPU (compiled and cached on first use)."""
        kernel = self._compiled.get(twin)
        if kernel is None:
            kernel = self._compiled[twin] = self.library.ascend_runtime(twin).compile(self.name, self.source,
                                                                                      self.options)
        return kernel

    def launch(self, options=None, *args):
        from .kernel_args import KernelArgs

        devices = {a.device.type for a in args if isinstance(a, KernelArgs) or (hasattr(a, "data_ptr")
                                                                                 and hasattr(a, "device"))}
        if len(devices) > 1:
            raise ValueError(f"{self.library.name}.{self.name}: expected tensor arguments on one device, got "
                             f"{sorted(devices)}")
        twin = devices != {"npu"}
        if devices - {"cpu", "npu"}:
            raise ValueError(f"{self.library.name}.{self.name}: expected NPU or CPU tensors (an Ascend kernel), "
                             f"got {sorted(devices)}")
        from .backends.ascend.options import AscendLaunchOptions

        grid = self.grid
        if self.params is not None:
            from .tilelang_route import dims
            from .tilelang_route.twin import arguments_by_name, check_tensors
            if self.specs:  # shapes and dtypes before any launch: the kernel addresses the tensors from them
                check_tensors(self.specs, args, f"{self.library.name}.{self.name}")
            values = dims.bind(self.dims, args)
            grid = None if grid is None else dims.num_blocks(grid, values)
            args = arguments_by_name(self.params, self.source, args, values)
        if options is None or options.num_blocks is None:
            if grid is None:
                raise ValueError(f"options: expected AscendLaunchOptions.num_blocks or a grid for "
                                 f"{self.library.name}.{self.name}, got num_blocks None")
            options = (options or AscendLaunchOptions()).override_with(AscendLaunchOptions(num_blocks=grid))
        if not twin:  # the NPU kernel reads the struct's bytes; the twin also guards the tensors it names
            args = tuple(a.tensor if isinstance(a, KernelArgs) else a for a in args)
        runtime = self.library.ascend_runtime(twin)
        return runtime.launch(self.kernel(twin), options, *args)

    def __call__(self, num_blocks: int | None, *args):
        from .backends.ascend.options import AscendLaunchOptions

        return self.launch(AscendLaunchOptions(num_blocks=num_blocks), *args)


def _define_value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str) and v and "\n" not in v:
        return v
    raise DeepJITError(f"define value must be a bool, number or one-line string, got {v!r}")
