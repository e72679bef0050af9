"""CUDA compiler and launch options (spec: deepjit §11)."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import DeepJITError
from ...external import shell_join
from ...options import Options


def default_nvcc_flags(cpp_standard: int) -> tuple:
    return (f"-std=c++{cpp_standard}", "--compiler-options=-fPIC", "--compiler-options=-fconcepts",
            "--expt-relaxed-constexpr", "--expt-extended-lambda")


@dataclass
class CudaCompilerOptions(Options):
    optimize_level: str | None = None
    use_fast_math: bool | None = None
    ptxas_verbose: bool | None = None
    ptxas_register_usage_level: int | None = None
    check_no_spills: bool | None = None
    check_no_local_memory: bool | None = None
    with_line_info: bool | None = None
    dump_ptx: bool | None = None
    dump_sass: bool | None = None
    arch: str | None = None
    nvcc_flags: tuple | None = None
    extra_nvcc_flags: tuple | None = None
    post_hook: str | None = None

    def get_flags(self) -> list[str]:
        """The keyed flags, in upstream order (dump flags are not flags)."""
        if not self.optimize_level:
            raise DeepJITError("optimization level must be specified")
        if not self.arch:
            raise DeepJITError("CUDA architecture must be specified")
        flags = [f"--gpu-architecture=sm_{self.arch}", f"-O{self.optimize_level}",
                 f"--compiler-options=-O{self.optimize_level}"]
        if self.use_fast_math:
            flags.append("--use_fast_math")
        if self.ptxas_verbose:
            flags.append("--ptxas-options=--verbose")
        if self.ptxas_register_usage_level is not None:
            flags.append(f"--ptxas-options=--register-usage-level={self.ptxas_register_usage_level}")
        if self.check_no_spills:
            flags.append("--ptxas-options=--warn-on-spills")
        if self.check_no_local_memory:
            flags.append("--ptxas-options=--warn-on-local-memory-usage")
        if self.with_line_info:
            flags.append("--generate-line-info")
        return flags + list(self.nvcc_flags or ()) + list(self.extra_nvcc_flags or ())

    def hash_components(self) -> list[str]:
        return [shell_join(self.get_flags())]


@dataclass
class CudaLaunchOptions(Options):
    """``grid``/``block``: an int or a 1-3 tuple; ``stream``: a ``CUstream`` address (unset: torch's current)."""
    grid: object | None = None
    block: object | None = None
    num_smem_bytes: int | None = None
    cluster_dim: int | None = None
    cooperative: bool | None = None
    enable_pdl: bool | None = None
    stream: int | None = None


def dim3(value, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else ()
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in dims):
        raise DeepJITError(f"CUDA {what} dimensions must be 1 to 3 positive ints, got {value!r}")
    return tuple(dims) + (1,) * (3 - len(dims))
