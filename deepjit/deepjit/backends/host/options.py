"""Host C++ compiler and launch options."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...errors import DeepJITError
from ...external import shell_join
from ...options import Options

DEFAULT_CXX_FLAGS = ("-fPIC", "-shared", "-fno-math-errno", "-Wall", "-Wno-unknown-pragmas")


@dataclass(frozen=True)
class HostCompilerOptions(Options):
    optimize_level: Optional[str] = None
    march: Optional[str] = None
    openmp: Optional[bool] = None
    cpp_standard: Optional[str] = None
    cxx_flags: Optional[tuple] = None
    extra_cxx_flags: Optional[tuple] = None

    def get_flags(self) -> list[str]:
        if not self.optimize_level:
            raise DeepJITError("optimization level must be specified")
        flags = [f"-O{self.optimize_level}"]
        if self.march:
            flags.append(f"-march={self.march}")
        if self.openmp:
            flags.append("-fopenmp")
        flags.append(f"-std=c++{self.cpp_standard or '17'}")
        flags += list(self.cxx_flags or ()) + list(self.extra_cxx_flags or ())
        return flags

    def hash_components(self) -> list[str]:
        return [shell_join(self.get_flags())]


@dataclass(frozen=True)
class HostLaunchOptions(Options):
    """Host kernels take their thread count as an ordinary argument; nothing to set per launch."""
