"""Ascend twin compiler options (the host C++ compiler's flags) and its launch options, which are
the real Ascend toolchain's ``AscendLaunchOptions`` so library glue is identical on NPU and twin."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import DeepJITError
from ...external import shell_join
from ...options import Options
from ..ascend.options import AscendLaunchOptions

DEFAULT_CXX_FLAGS = ("-fPIC", "-shared", "-pthread", "-fno-strict-aliasing", "-Wall", "-Wno-unknown-pragmas",
                     "-Wno-unused-variable", "-Wno-unused-but-set-variable", "-Wno-unused-function")

__all__ = ["AscendLaunchOptions", "TwinCompilerOptions", "DEFAULT_CXX_FLAGS"]


@dataclass
class TwinCompilerOptions(Options):
    optimize_level: str | None = None
    debug_info: bool | None = None
    cpp_standard: str | None = None
    cxx_flags: tuple | None = None
    extra_cxx_flags: tuple | None = None

    def get_flags(self) -> list[str]:
        if not self.optimize_level:
            raise DeepJITError("optimization level must be specified")
        flags = [f"-O{self.optimize_level}", f"-std=c++{self.cpp_standard or '17'}"]
        if self.debug_info:
            flags.append("-g")
        return flags + list(self.cxx_flags or ()) + list(self.extra_cxx_flags or ())

    def hash_components(self) -> list[str]:
        return [shell_join(self.get_flags())]
