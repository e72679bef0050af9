"""The CUDA toolchain: nvcc builds a cubin, the driver API loads and launches it (spec: deepjit §11)."""
from __future__ import annotations

import os
import re
import shutil
import sys
import threading

from ...disk_cache import write_file_sync
from ...errors import CompileError, DeepJITError, ToolchainNotFoundError
from ...external import call_external_command, shell_join
from ...hashing import hash_hex
from .. import Backend
from . import driver
from .device import CudaDevice
from .kernel import CudaKernel
from .options import CudaCompilerOptions, CudaLaunchOptions, default_nvcc_flags

DEFAULT_CUDA_HOME = "/usr/local/cuda"
MIN_NVCC_VERSION = (12, 9)
_SPILL_RE = re.compile(r"spilled\s+to\s+local\s+memory", re.IGNORECASE)
_LOCAL_RE = re.compile(r"local\s+memory\s+used", re.IGNORECASE)
_hook_memo = threading.local()


def find_cuda_home() -> str:
    """CUDA_HOME, CUDA_PATH, the folder above ``which nvcc``, then /usr/local/cuda."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home:
            if not os.path.isdir(home):
                raise ToolchainNotFoundError(f"{var}={home} is not a CUDA toolkit directory")
            return home
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    if os.path.isdir(DEFAULT_CUDA_HOME):
        return DEFAULT_CUDA_HOME
    raise ToolchainNotFoundError(f"CUDA home was not found (looked at CUDA_HOME, CUDA_PATH, nvcc on "
                                 f"PATH={os.environ.get('PATH', '')}, {DEFAULT_CUDA_HOME})")


def parse_nvcc_version(output: str) -> tuple[int, int]:
    m = re.search(r"release (\d+)\.(\d+)", output)
    if m is None:
        raise DeepJITError(f"failed to parse NVCC version: {output}")
    return int(m.group(1)), int(m.group(2))


class CudaBackend(Backend):
    name = "cuda"

    def __init__(self, env, config):
        super().__init__(env, config)
        self._device = CudaDevice()

    @property
    def device(self) -> CudaDevice:
        return self._device

    def discover(self) -> None:
        self.home = find_cuda_home()
        self.nvcc = self.env.get_str("JIT_NVCC_COMPILER") or os.path.join(self.home, "bin", "nvcc")
        if not (os.path.isfile(self.nvcc) and os.access(self.nvcc, os.X_OK)):
            raise ToolchainNotFoundError(f"NVCC compiler is not executable: {self.nvcc}")
        cuobjdump = os.path.join(self.home, "bin", "cuobjdump")
        self.cuobjdump = cuobjdump if os.access(cuobjdump, os.X_OK) else None
        self.version = call_external_command([self.nvcc, "--version"])
        if parse_nvcc_version(self.version) < MIN_NVCC_VERSION:
            raise ToolchainNotFoundError(f"NVCC {'.'.join(map(str, parse_nvcc_version(self.version)))} at {self.nvcc} "
                                         f"is too old; need {'.'.join(map(str, MIN_NVCC_VERSION))} or newer")

    def compiler_info(self) -> dict:
        return {"path": self.nvcc, "version": self.version}

    def compiler_hash(self) -> str:
        return hash_hex(self.version)

    def default_compiler_options(self) -> CudaCompilerOptions:
        debug = self.env.get_bool("JIT_DEBUG")
        dump = debug or self.env.get_bool("JIT_DUMP_ASM")
        # The architecture comes from the current GPU; without one it stays unset and a compile
        # (e.g. compile_without_load on a build machine) must name it.
        arch = self.device.get_arch() if driver.available() else None
        return CudaCompilerOptions(
            optimize_level="3", use_fast_math=False, ptxas_verbose=debug or self.env.get_bool("JIT_PTXAS_VERBOSE"),
            ptxas_register_usage_level=10, check_no_spills=self.env.get_bool("JIT_CHECK_NO_SPILLS"),
            check_no_local_memory=self.env.get_bool("JIT_CHECK_NO_LOCAL_MEMORY"),
            with_line_info=debug or self.env.get_bool("JIT_WITH_LINEINFO"),
            dump_ptx=dump or self.env.get_bool("JIT_DUMP_PTX"), dump_sass=dump or self.env.get_bool("JIT_DUMP_SASS"),
            arch=arch, nvcc_flags=default_nvcc_flags(self.env.get_int("JIT_CPP_STANDARD", 20)), extra_nvcc_flags=())

    def default_launch_options(self) -> CudaLaunchOptions:
        return CudaLaunchOptions(num_smem_bytes=0, cluster_dim=1, cooperative=False, enable_pdl=False)

    def post_hook_hash(self, options: CudaCompilerOptions, config) -> str:
        if options.post_hook is None:
            return ""
        path = config.get_python_path(options.post_hook)
        memo = _hook_memo.__dict__.setdefault("hashes", {})
        if path not in memo:
            try:
                with open(path, "rb") as f:
                    content = f.read()
            except OSError:
                raise DeepJITError(f"failed to open for reading: {path}") from None
            memo[path] = hash_hex(options.post_hook, content)   # the hook name, then its bytes, as DeepJIT
        return memo[path]

    def compile(self, source: str, build_dir: str, options: CudaCompilerOptions) -> str:
        src = os.path.join(build_dir, "kernel.cu")
        cubin = os.path.join(build_dir, "kernel.cubin")
        write_file_sync(src, source)
        includes = [a for d in self.config.include_dirs for a in ("--include-path", d)]
        flags = options.get_flags()
        argv = [self.nvcc, src, "--cubin", "--output-file", cubin, *flags, *includes]
        output = self.run(argv, cwd=build_dir)
        if options.ptxas_verbose:
            print(output, flush=True)
        if options.check_no_spills and _SPILL_RE.search(output):
            raise CompileError(f"register spills are not allowed:\n{shell_join(argv)}\n{output}")
        if options.check_no_local_memory and _LOCAL_RE.search(output):
            raise CompileError(f"local memory use is not allowed:\n{shell_join(argv)}\n{output}")
        self.require_output(cubin, "the cubin (NVCC)")
        if options.post_hook is not None:
            hook = self.config.get_python_path(options.post_hook)
            self.run([sys.executable, hook, cubin], cwd=build_dir)
            self.require_output(cubin, "the cubin (NVCC)")
        if options.dump_ptx:
            ptx = os.path.join(build_dir, "kernel.ptx")
            self.run([self.nvcc, src, "--ptx", "--output-file", ptx, *flags, *includes], cwd=build_dir)
            self.require_output(ptx, "the PTX (NVCC)")
        if options.dump_sass:
            if self.cuobjdump is None:
                raise ToolchainNotFoundError(f"dump_sass needs cuobjdump in {os.path.join(self.home, 'bin')}")
            sass = self.run([self.cuobjdump, "--dump-sass", cubin], cwd=build_dir)
            if not sass.strip():
                raise CompileError(f"cuobjdump printed no SASS for {cubin}")
            write_file_sync(os.path.join(build_dir, "kernel.sass"), sass)
        return shell_join(argv)

    def load(self, path: str) -> CudaKernel:
        return CudaKernel(path)


BACKEND = CudaBackend
