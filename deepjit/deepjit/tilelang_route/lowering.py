"""Lowering a TileLang Ascend kernel to AscendC source and reading its entry point and kind."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ..backends.params import ENTRY_RE, strip_comments
from ..errors import DeepJITError

KINDS = ("cube", "vector", "mix")


@dataclass(frozen=True)
class AscendKernelSpec:
    """One TileLang Ascend kernel at a representative shape.

    ``build`` returns the ``tilelang`` PrimFunc; ``kind`` is the core type it must lower to:
    ``"cube"`` (AIC only), ``"vector"`` (AIV only) or ``"mix"`` (both, ``__mix__``)."""
    name: str
    build: Callable[[], object]
    kind: str

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS} (AscendKernelSpec {self.name!r}), got {self.kind!r}")
        if not re.fullmatch(r"[A-Za-z0-9_]+", self.name or ""):
            raise ValueError(f"name: expected only letters, digits, or underscores (an AscendKernelSpec), got {self.name!r}")


@dataclass(frozen=True)
class LoweredKernel:
    source: str
    entry: str
    kind: str


def _entries(source: str) -> list[tuple[str, str]]:
    return [(m.group(2), m.group(1)) for m in ENTRY_RE.finditer(strip_comments(source))]


# Quoted includes of the Ascend C API headers, as T.import_source code writes them (``#include
# "c_api/asc_simd.h"``, ``"kernel_operator.h"``). deepjit's include tracking accepts only <...> names
# (a quoted name could resolve beside the including file and escape the cache key); a kernel source
# has no directory, so both forms find these headers on the include path alike.
_QUOTED_API_INCLUDE_RE = re.compile(r'^(\s*#\s*include\s*)"((?:c_api|simt_api|tl_templates)/[\w./]+|kernel_operator\.h)"',
                                    re.M)


def bracket_api_includes(source: str) -> str:
    """``source`` with quoted includes of the Ascend C API headers written as ``<...>`` includes."""
    return _QUOTED_API_INCLUDE_RE.sub(r"\1<\2>", source)


def entry_point(source: str) -> str:
    entries = _entries(source)
    if len(entries) != 1:
        raise DeepJITError(f"expected exactly one __global__ entry point in the AscendC source, found {len(entries)}")
    return entries[0][0]


def kernel_kind(source: str) -> str:
    """``cube``/``vector``/``mix`` from the entry's ``__cube__``/``__vector__``/``__mix__`` qualifier."""
    entries = _entries(source)
    if len(entries) != 1:
        raise DeepJITError(f"expected exactly one __global__ entry point in the AscendC source, found {len(entries)}")
    qualifiers = entries[0][1]
    kinds = [k for k in KINDS if f"__{k}__" in qualifiers]
    if len(kinds) != 1:
        raise DeepJITError(f"cannot tell the core type of entry {entries[0][0]!r} from {qualifiers!r}")
    return kinds[0]


def lower(func) -> LoweredKernel:
    """TileLang's Ascend pipeline up to AscendC source (no bisheng needed)."""
    import tilelang
    from tvm.target import Target

    with Target("ascend"):
        artifact = tilelang.lower(func, target="ascend")
    source = artifact.kernel_source
    if not source:
        raise DeepJITError("TileLang produced no AscendC source")
    return LoweredKernel(source=source, entry=entry_point(source), kind=kernel_kind(source))
