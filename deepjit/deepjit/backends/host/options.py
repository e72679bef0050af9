"""Host C++ compiler and launch options."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import DeepJITError
from ...external import shell_join
from ...options import Options
from .matrix_engine import ENGINES, define, link_flags

DEFAULT_CXX_FLAGS = ("-fPIC", "-shared", "-fno-math-errno", "-Wall", "-Wno-unknown-pragmas")


@dataclass
class HostCompilerOptions(Options):
    optimize_level: str | None = None
    march: str | None = None
    openmp: bool | None = None
    cpp_standard: str | None = None
    cxx_flags: tuple | None = None
    extra_cxx_flags: tuple | None = None
    matrix_engine: str | None = None     # see matrix_engine.py; a compiler define, so part of the key

    def get_flags(self) -> list[str]:
        if not self.optimize_level:
            raise DeepJITError("optimization level must be specified")
        flags = [f"-O{self.optimize_level}"]
        if self.march:
            flags.append(f"-march={self.march}")
        if self.openmp:
            flags.append("-fopenmp")
        flags.append(f"-std=c++{self.cpp_standard or '17'}")
        if self.matrix_engine:
            if self.matrix_engine not in ENGINES:
                raise DeepJITError(f"unknown matrix engine {self.matrix_engine!r}; expected one of {', '.join(ENGINES)}")
            flags.append(define(self.matrix_engine))
        flags += list(self.cxx_flags or ()) + list(self.extra_cxx_flags or ())
        return flags

    def get_link_flags(self) -> list[str]:
        """Libraries the kernel links (after its source: the linker drops a library named before
        anything needs it)."""
        return link_flags(self.matrix_engine) if self.matrix_engine else []

    def hash_components(self) -> list[str]:
        return [shell_join(self.get_flags() + self.get_link_flags())]


@dataclass
class HostLaunchOptions(Options):
    """Host kernels take their thread count as an ordinary argument; nothing to set per launch."""
