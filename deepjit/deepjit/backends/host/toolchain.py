"""The host toolchain: the system C++ compiler builds a shared object per kernel.

The CPU model and ISA flags join the compiler hash because ``-march=native`` makes the binary
depend on the machine: a cache shared between different CPUs must never load a foreign binary.
"""
from __future__ import annotations

import os
import platform
import shutil

from ...config import Config
from ...disk_cache import write_file_sync
from ...errors import DeepJITError, ToolchainNotFoundError
from ...external import call_external_command, shell_join
from ...hashing import hash_hex
from .. import Backend
from . import matrix_engine
from .kernel import HostKernel
from .options import DEFAULT_CXX_FLAGS, HostCompilerOptions, HostLaunchOptions

INCLUDE_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "include"))
INCLUDE_PREFIX = "deepjit/"
_DEFAULT_COMPILERS = ("g++", "c++", "clang++")


def cpu_identity() -> tuple[str, str]:
    """(model name, sorted ISA flags) of the first CPU in /proc/cpuinfo, or platform strings."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = fields.get("model name") or platform.processor() or platform.machine()
    flags = fields.get("flags") or fields.get("Features") or ""
    return model, " ".join(sorted(flags.split()))


def find_cxx(env) -> str:
    name, override = env.lookup("JIT_CXX")
    if name is not None:
        path = shutil.which(override) if override else None
        if path is None:
            raise ToolchainNotFoundError(f"host C++ compiler {override!r} from {name} was not found or is not executable")
        return path
    for cand in _DEFAULT_COMPILERS:
        path = shutil.which(cand)
        if path:
            return path
    raise ToolchainNotFoundError(
        f"no host C++ compiler: looked for {env.prefix}_JIT_CXX / DJ_JIT_CXX, then {', '.join(_DEFAULT_COMPILERS)} "
        f"on PATH={os.environ.get('PATH', '')}")


class HostBackend(Backend):
    name = "host"

    def discover(self) -> None:
        self.cxx = find_cxx(self.env)
        self.version = call_external_command([self.cxx, "--version"])
        self.cpu_model, self.cpu_flags = cpu_identity()
        # what the defaults chose (and which variable forced it); check_matrix_engine reads it
        self.matrix = matrix_engine.choose(self.env, self.cpu_flags, self.env.get_str("JIT_HOST_MARCH", "native"))

    def effective_config(self, config: Config) -> Config:
        return config.with_include([INCLUDE_DIR], [INCLUDE_PREFIX])

    def compiler_info(self) -> dict:
        return {"path": self.cxx, "version": self.version, "cpu_model": self.cpu_model, "cpu_flags": self.cpu_flags}

    def compiler_hash(self) -> str:
        return hash_hex(self.version, self.cpu_model, self.cpu_flags)

    def default_compiler_options(self) -> HostCompilerOptions:
        march = self.env.get_str("JIT_HOST_MARCH", "native")
        self.matrix = matrix_engine.choose(self.env, cpu_identity()[1], march)
        return HostCompilerOptions(optimize_level=self.env.get_str("JIT_HOST_OPT_LEVEL", "3"),
                                   march=march, openmp=True,
                                   cpp_standard=self.env.get_str("JIT_CPP_STANDARD", "17"),
                                   cxx_flags=DEFAULT_CXX_FLAGS, extra_cxx_flags=(),
                                   matrix_engine=self.matrix.engine)

    def check_matrix_engine(self, engine: str | None) -> None:
        """DeepJITError when kernels cannot be built on ``engine`` on this CPU (forced or overridden)."""
        if not engine:
            return
        forced = self.matrix.source if engine == self.matrix.engine and self.matrix.source else None
        error = matrix_engine.unavailable(engine, self.cpu_flags, forced or "HostCompilerOptions.matrix_engine")
        if error is not None:
            raise DeepJITError(error)

    def default_launch_options(self) -> HostLaunchOptions:
        return HostLaunchOptions()

    def compile(self, source: str, build_dir: str, options: HostCompilerOptions) -> str:
        self.check_matrix_engine(options.matrix_engine)
        src = os.path.join(build_dir, "kernel.cpp")
        out = os.path.join(build_dir, "kernel.so")
        write_file_sync(src, source)
        argv = [self.cxx, *options.get_flags(), *[f"-I{d}" for d in self.effective_config(self.config).include_dirs],
                src, *options.get_link_flags(), "-o", out]
        self.run(argv, cwd=build_dir)
        self.require_output(out, "the host kernel's shared object")
        return shell_join(argv)

    def load(self, path: str) -> HostKernel:
        return HostKernel(path)


BACKEND = HostBackend
