"""The matrix engine of host kernels: what their BF16 products run on.

``brgemm`` (oneDNN's batch-reduce GEMM micro-kernel as torch exports it, ``at::native::cpublas::brgemm``:
oneDNN picks AMX tiles, AVX-512 BF16, AVX-512 or AVX2 at run time), ``avx512bf16`` (our
vdpbf16ps loops) or ``fma`` (FP32 multiply-add on unpacked BF16, any CPU). ``<PREFIX>_HOST_MATRIX`` /
``DJ_HOST_MATRIX`` forces one; otherwise the best one for this CPU is used. The choice reaches the
kernels as a compiler define (``deepjit/host/matrix_engine.hpp``) and, for brgemm, as link flags to
torch's CPU library, so it is part of every host kernel's cache key.

There is no hand-written AMX engine: brgemm is how host kernels reach AMX (oneDNN emits the tile
code), so ``amx`` is rejected with that pointer. brgemm is the automatic choice where the CPU has
AMX BF16, where ``make bench`` measured it faster than vdpbf16ps (about 5x on a Sapphire-Rapids-class
Xeon); elsewhere it is only used when forced, until a benchmark there shows it at least as fast.
"""
from __future__ import annotations

import functools
import importlib.util
import mmap
import os
import platform
from dataclasses import dataclass

from ...errors import DeepJITError

ENGINES = ("brgemm", "avx512bf16", "fma")              # best first
REQUIRED_FLAGS = {
    "brgemm": (),                                      # oneDNN dispatches on the CPU itself
    "avx512bf16": ("avx512f", "avx512bw", "avx512_bf16"),
    "fma": (),                                         # portable code where AVX2 + FMA are absent
}
BRGEMM_DEFAULT_FLAGS = ("amx_tile", "amx_bf16")        # where brgemm is chosen without being forced
ENV_SUFFIX = "HOST_MATRIX"
# at::native::cpublas::brgemm on BF16 (its ABI name): present in torch >= 2.6 CPU builds with oneDNN
BRGEMM_SYMBOL = "_ZN2at6native7cpublas6brgemmEllllllbPKN3c108BFloat16ES5_Pfb"


def define(engine: str) -> str:
    """The compiler flag that selects ``engine`` in the host headers."""
    return f"-DDJ_HOST_MATRIX_ENGINE=DJ_MATRIX_ENGINE_{engine.upper()}"


@functools.cache
def torch_lib_dir() -> str | None:
    """The directory of the installed torch's ``libtorch_cpu.so`` (found without importing torch)."""
    spec = importlib.util.find_spec("torch")
    for root in (spec.submodule_search_locations or []) if spec else []:
        lib = os.path.join(root, "lib")
        if os.path.isfile(os.path.join(lib, "libtorch_cpu.so")):
            return lib
    return None


@functools.cache
def brgemm_missing() -> str | None:
    """Why brgemm cannot be linked here, or None."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"oneDNN's brgemm micro-kernel is exported by torch on x86-64 only (this machine: {platform.machine()})"
    lib = torch_lib_dir()
    if lib is None:
        return "no installed torch with lib/libtorch_cpu.so was found"
    if not _mentions(os.path.join(lib, "libtorch_cpu.so"), BRGEMM_SYMBOL.encode() + b"\0"):
        return f"{lib}/libtorch_cpu.so does not export at::native::cpublas::brgemm (torch built without oneDNN?)"
    return None


def _mentions(path: str, needle: bytes) -> bool:
    """Whether the file holds ``needle`` (a symbol name in its string table; mapped, not read: the
    library is hundreds of MB)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return m.find(needle) >= 0


def link_flags(engine: str) -> list[str]:
    """Linker flags a kernel on ``engine`` needs: brgemm links torch's CPU library, found at run time
    through an rpath to the installed torch."""
    if engine != "brgemm" or brgemm_missing() is not None:
        return []
    lib = torch_lib_dir()
    return [f"-L{lib}", f"-Wl,-rpath,{lib}", "-ltorch_cpu", "-lc10"]


def missing_flags(engine: str, cpu_flags: str) -> list[str]:
    have = set(cpu_flags.split())
    return [f for f in REQUIRED_FLAGS[engine] if f not in have]


def present_engines(cpu_flags: str) -> list[str]:
    """Engines this machine can build kernels on, best first."""
    return [e for e in ENGINES if not missing_flags(e, cpu_flags) and (e != "brgemm" or brgemm_missing() is None)]


@dataclass(frozen=True)
class Choice:
    engine: str
    source: str | None          # the variable that forced it, None when chosen from the CPU's flags


def automatic(cpu_flags: str) -> str:
    """The engine used when none is forced (under -march=native)."""
    have = set(cpu_flags.split())
    if all(f in have for f in BRGEMM_DEFAULT_FLAGS) and brgemm_missing() is None:
        return "brgemm"
    return next(e for e in ENGINES if e != "brgemm" and not missing_flags(e, cpu_flags))


def _unknown(name: str, raw: str) -> str:
    hint = ("; deepjit has no hand-written AMX engine: DJ_HOST_MATRIX=brgemm runs on AMX tiles where the CPU "
            "has them (oneDNN picks them)") if raw.strip().lower() == "amx" else ""
    return f"invalid value for {name}: {raw!r}; expected one of {', '.join(ENGINES)}{hint}"


def choose(env, cpu_flags: str, march: str | None) -> Choice:
    """The engine for this process's host kernels. An invalid name raises now; an engine this
    machine lacks is kept and fails when a kernel is compiled (``unavailable``), so the libraries
    still import."""
    name, raw = env.lookup(ENV_SUFFIX)
    if name is None or raw == "":
        # The CPU's flags describe the compiler's target only under -march=native.
        return Choice(automatic(cpu_flags) if march == "native" else "fma", None)
    engine = raw.strip().lower()
    if engine not in ENGINES:
        raise DeepJITError(_unknown(name, raw))
    return Choice(engine, name)


def unavailable(engine: str, cpu_flags: str, source: str) -> str | None:
    """Why host kernels cannot be built on ``engine`` here (``source`` names who asked for it), or None."""
    if engine not in ENGINES:
        return f"{source}={engine!r}: unknown matrix engine; expected one of {', '.join(ENGINES)}"
    if engine == "brgemm" and brgemm_missing() is not None:
        return (f"{source}=brgemm: {brgemm_missing()} "
                f"(engines present: {', '.join(present_engines(cpu_flags))})")
    missing = missing_flags(engine, cpu_flags)
    if missing:
        return (f"{source}={engine}: the {engine} matrix engine needs the CPU flags "
                f"{' '.join(REQUIRED_FLAGS[engine])}; this CPU lacks {' '.join(missing)} "
                f"(engines present: {', '.join(present_engines(cpu_flags))})")
    return None
