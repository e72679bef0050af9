"""Ascend compiler and launch options (spec: deepjit §10.2, §10.5)."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import DeepJITError
from ...external import shell_join
from ...options import Options

DEFAULT_BISHENG_FLAGS = ("--cce-aicore-only", "-mllvm", "-enable-hiipu-vf-loop-unroll",
                         "-mllvm", "-cce-aicore-dcpreload-args=false")
DEFAULT_LINKER_FLAGS = ("-m", "aicorelinux", "-Ttext", "0", "--no-mmap-output-file")
DEFAULT_AICPU_FLAGS = ("--cce-aicore-lang", "--cce-lite-aicpu", "--cce-aicpu-only", "--cce-aicpu-launch-with-interface",
                       "--cce-aicore-arch=dav-c310-vec", "-fPIC", "-c")
DEFAULT_AICPU_LINKER_FLAGS = ("-m", "aicpulinux", "-shared", "-soname=libkernel.aicpu.so", "-Bsymbolic",
                              "--no-mmap-output-file")
DEBUG_FLAGS = ("-g", "-gdwarf-5", "-gembed-source", "-gline-tables-only")
MAX_LAUNCH_TIMEOUT_SECS = 65535


@dataclass
class AscendCompilerOptions(Options):
    optimize_level: str | None = None
    arch: int | None = None
    debug_info: bool | None = None
    dump_asm: bool | None = None
    bisheng_flags: tuple | None = None
    linker_flags: tuple | None = None
    extra_bisheng_flags: tuple | None = None
    extra_linker_flags: tuple | None = None
    aicpu: bool | None = None
    aicpu_flags: tuple | None = None
    aicpu_linker_flags: tuple | None = None
    extra_aicpu_flags: tuple | None = None
    extra_aicpu_linker_flags: tuple | None = None

    def get_bisheng_flags(self) -> list[str]:
        if not self.optimize_level:
            raise DeepJITError("optimization level must be specified")
        flags = [f"-O{self.optimize_level}"]
        if not self.aicpu:
            if self.arch is None or isinstance(self.arch, bool) or not isinstance(self.arch, int) or self.arch <= 0:
                raise DeepJITError("Ascend architecture must be specified")
            flags.append(f"--npu-arch=dav-{self.arch}")
        if self.debug_info:
            flags += DEBUG_FLAGS
        if self.aicpu:
            return flags + list(self.aicpu_flags or ()) + list(self.extra_aicpu_flags or ())
        return flags + list(self.bisheng_flags or ()) + list(self.extra_bisheng_flags or ())

    def get_linker_flags(self) -> list[str]:
        if self.aicpu:
            return list(self.aicpu_linker_flags or ()) + list(self.extra_aicpu_linker_flags or ())
        return list(self.linker_flags or ()) + list(self.extra_linker_flags or ())

    def hash_components(self) -> list[str]:
        # Two components, so a token moving between the compiler and the linker lists changes the key;
        # only the active mode's lists are keyed.
        return (["aicpu"] if self.aicpu else []) + [shell_join(self.get_bisheng_flags()),
                                                     shell_join(self.get_linker_flags())]


@dataclass
class AscendLaunchOptions(Options):
    """``stream``: an ``aclrtStream`` address (unset: torch_npu's current stream)."""
    stream: int | None = None
    num_blocks: int | None = None
    num_ubuf_bytes: int | None = None
    num_launch_timeout_secs: int | None = None

    def validate(self, aicpu: bool) -> None:
        if _bad_int(self.num_blocks) or self.num_blocks <= 0:
            raise DeepJITError("Ascend block count must be positive")
        if _bad_int(self.num_ubuf_bytes) or self.num_ubuf_bytes < 0:
            raise DeepJITError("Ascend dynamic UB size must not be negative")
        if aicpu and self.num_ubuf_bytes != 0:
            raise DeepJITError("AICPU kernels do not support dynamic UB")
        if _bad_int(self.num_launch_timeout_secs) or not 0 <= self.num_launch_timeout_secs <= MAX_LAUNCH_TIMEOUT_SECS:
            raise DeepJITError("Ascend launch timeout is out of range")


def _bad_int(v) -> bool:
    return v is None or isinstance(v, bool) or not isinstance(v, int)
