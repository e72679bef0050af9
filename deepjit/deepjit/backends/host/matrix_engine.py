"""The matrix engine of host kernels: which instruction their BF16 products run on.

``amx`` (AMX BF16 tiles), ``avx512bf16`` (the vdpbf16ps dot product) or ``fma`` (FP32 multiply-add
on unpacked BF16, any CPU). The best one the CPU has is used unless ``<PREFIX>_HOST_MATRIX`` /
``DJ_HOST_MATRIX`` forces one. The choice reaches the kernels as a compiler define
(``deepjit/host/matrix_engine.hpp``), so it is part of every host kernel's cache key.

AMX is recognised (detected, reported) but not built yet: the automatic choice passes over it,
and forcing it fails with that reason.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import DeepJITError

ENGINES = ("amx", "avx512bf16", "fma")                 # best first
REQUIRED_FLAGS = {
    "amx": ("amx_tile", "amx_bf16"),
    "avx512bf16": ("avx512f", "avx512bw", "avx512_bf16"),
    "fma": (),                                         # portable code where AVX2 + FMA are absent
}
BUILT = ("avx512bf16", "fma")
ENV_SUFFIX = "HOST_MATRIX"


def define(engine: str) -> str:
    """The compiler flag that selects ``engine`` in the host headers."""
    return f"-DDJ_HOST_MATRIX_ENGINE=DJ_MATRIX_ENGINE_{engine.upper()}"


def missing_flags(engine: str, cpu_flags: str) -> list[str]:
    have = set(cpu_flags.split())
    return [f for f in REQUIRED_FLAGS[engine] if f not in have]


def present_engines(cpu_flags: str) -> list[str]:
    """Engines whose instructions the CPU has, best first (built or not)."""
    return [e for e in ENGINES if not missing_flags(e, cpu_flags)]


@dataclass(frozen=True)
class Choice:
    engine: str
    source: str | None          # the variable that forced it, None when chosen from the CPU's flags


def choose(env, cpu_flags: str, march: str | None) -> Choice:
    """The engine for this process's host kernels. An invalid name raises now; an engine the CPU
    or this deepjit lacks is kept and fails when a kernel is compiled (``unavailable``), so the
    libraries still import."""
    name, raw = env.lookup(ENV_SUFFIX)
    if name is None or raw == "":
        # The CPU's flags describe the compiler's target only under -march=native.
        if march == "native":
            return Choice(next(e for e in ENGINES if e in BUILT and not missing_flags(e, cpu_flags)), None)
        return Choice("fma", None)
    engine = raw.strip().lower()
    if engine not in ENGINES:
        raise DeepJITError(f"invalid value for {name}: {raw!r}; expected one of {', '.join(ENGINES)}")
    return Choice(engine, name)


def unavailable(engine: str, cpu_flags: str, source: str) -> str | None:
    """Why host kernels cannot be built on ``engine`` here (``source`` names who asked for it), or None."""
    if engine not in ENGINES:
        return f"{source}={engine!r}: unknown matrix engine; expected one of {', '.join(ENGINES)}"
    missing = missing_flags(engine, cpu_flags)
    if missing:
        return (f"{source}={engine}: the {engine} matrix engine needs the CPU flags "
                f"{' '.join(REQUIRED_FLAGS[engine])}; this CPU lacks {' '.join(missing)} "
                f"(engines present: {', '.join(present_engines(cpu_flags))})")
    if engine not in BUILT:
        return (f"{source}={engine}: this CPU has {' '.join(REQUIRED_FLAGS[engine])}, but deepjit's {engine} "
                f"engine is not built yet; use one of {', '.join(BUILT)}")
    return None
