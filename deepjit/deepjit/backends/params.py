"""The declared parameter types of a device kernel, read from its source.

DeepJIT's C++ launch packs each argument with its static C++ type. A Python caller has no static types,
so the Ascend and CUDA kernels read the entry kernel's declaration from the source kept next to the binary
(``kernel.asc`` / ``kernel.cu``) and pack plain Python ``int`` and ``float`` values as the declared
parameter types (a ``float`` parameter gets 4 bytes, not a ``double``). A kernel whose declaration is not
in that source (defined in an included header, say) keeps the explicit rule of ``args.py``. An Ascend
entry's scheduling mode (``__schedmode__``) is read from the same declaration.
"""
from __future__ import annotations

import ctypes
import re

from ..errors import DeepJITError

POINTER = "ptr"
SCALARS = {
    "bool": ctypes.c_bool, "char": ctypes.c_int8, "float": ctypes.c_float, "double": ctypes.c_double,
    "int8_t": ctypes.c_int8, "int16_t": ctypes.c_int16, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64,
    "uint8_t": ctypes.c_uint8, "uint16_t": ctypes.c_uint16, "uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64,
    "short": ctypes.c_short, "int": ctypes.c_int, "long": ctypes.c_long, "long long": ctypes.c_longlong,
    "signed char": ctypes.c_byte, "unsigned char": ctypes.c_ubyte, "unsigned short": ctypes.c_ushort,
    "unsigned": ctypes.c_uint, "unsigned int": ctypes.c_uint, "unsigned long": ctypes.c_ulong,
    "unsigned long long": ctypes.c_ulonglong, "size_t": ctypes.c_size_t,
}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "signed"}
# comments, and the string and character literals that may hold comment marks (kept)
_COMMENTS = re.compile(r'("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')|//[^\n]*|/\*.*?\*/', re.S)
_ATTRIBUTES = re.compile(r"(?:__launch_bounds__|__mix__|__schedmode__)\s*\([^)]*\)|__attribute__\s*\(\(.*?\)\)", re.S)
_SCHED_MODE_RE = re.compile(r"__schedmode__\s*\(\s*([^)]*?)\s*\)")
# An Ascend entry: extern "C", then its qualifiers (__global__ among them; __mix__(1, 2) and __schedmode__(1) have
# arguments), then void <name>(; matched on source without comments (strip_comments).
ENTRY_RE = re.compile(r'extern\s+"C"\s+((?:[^;{(]|\([^)]*\))*?\b__global__\b(?:[^;{(]|\([^)]*\))*?)\s*\bvoid\s+'
                      r'(\w+)\s*\(')
_ENTRY = re.compile(r"__global__\b[\w\s]*?\b(\w+)\s*\(")
_POINTER_MARKS = ("*", "&", "GM_ADDR", "__gm__")


def _parameters(text: str, open_paren: int) -> list[str] | None:
    depth, start, parts = 0, open_paren + 1, []
    for i in range(open_paren, len(text)):
        c = text[i]
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
            if depth == 0:
                parts.append(text[start:i])
                return [p.strip() for p in parts if p.strip() and p.strip() != "void"]
        elif c == "," and depth == 1:
            parts.append(text[start:i])
            start = i + 1
    return None


def _classify(param: str) -> str:
    """``"ptr"``, a key of ``SCALARS``, or the declared type as written (unknown to the packer)."""
    param = param.split("=")[0].strip()
    if any(mark in param for mark in _POINTER_MARKS):
        return POINTER
    words = [w for w in param.split() if w not in _QUALIFIERS]
    if len(words) > 1:
        words = words[:-1]                                 # the parameter's name
    written = " ".join(w.removeprefix("std::") for w in words)
    if written in ("long int", "long long int", "unsigned long int", "unsigned long long int", "short int"):
        written = written.removesuffix(" int")
    return written


def declared_types(source: str, name: str | None = None) -> list[str] | None:
    """The parameter kinds of the ``__global__`` function ``name`` (any name: the source's only entry
    kernel), or None when the source does not declare exactly that one."""
    text = _ATTRIBUTES.sub(" ", strip_comments(source))
    found = {}
    for match in _ENTRY.finditer(text):
        if name is None or match.group(1) == name:
            params = _parameters(text, match.end() - 1)
            if params is not None:
                found.setdefault(match.group(1), [_classify(p) for p in params])
    if len(found) != 1:
        return None
    return next(iter(found.values()))


def read_declared_types(source_path: str, name: str | None = None) -> list[str] | None:
    """``declared_types`` of the source file kept beside a kernel's binary (None if it is missing)."""
    try:
        with open(source_path, encoding="utf-8", errors="replace") as f:
            return declared_types(f.read(), name)
    except OSError:
        return None


def sched_mode_of(name: str, qualifiers: str) -> int:
    """The entry's ``__schedmode__(mode)``, 0 without one. The AscendC kernel qualifier (CANN's programming
    guide, kernel function qualifiers; DeepGEMM-Ascend's Mega MoE kernel carries ``__schedmode__(1)``) takes
    0, normal mode: blocks start on whatever cores are idle, the rest as cores free up, or 1, batch mode: the
    launch starts only once all its cores are idle (``aclrtLaunchKernelAttrValue``'s schemMode; CANN's
    ``SetScheduleMode``: the mode inter-core synchronising operators need, since in normal mode a launch whose
    cores are partly held by another stream's kernel waits on cores that never start)."""
    modes = _SCHED_MODE_RE.findall(qualifiers)
    if not modes:
        return 0
    if len(modes) > 1 or modes[0] not in ("0", "1"):
        raise DeepJITError(f"kernel {name}: __schedmode__ takes 0 (normal) or 1 (batch) once, "
                           f"got {qualifiers.strip()!r}")
    return int(modes[0])


def strip_comments(source: str) -> str:
    """``source`` with its comments blanked (string and character literals kept)."""
    return _COMMENTS.sub(lambda m: m.group(1) or " ", source)


def read_sched_mode(source_path: str, name: str) -> int:
    """``sched_mode_of`` the entry ``name`` in the source kept beside a kernel's binary (0 if it is missing)."""
    try:
        with open(source_path, encoding="utf-8", errors="replace") as f:
            text = strip_comments(f.read())
    except OSError:
        return 0
    found = re.search(rf"\bvoid\s+{re.escape(name)}\s*\(", text)
    if found is None:
        return 0
    # the qualifiers: back to the statement or block before the name (extern "C" before them or not), without
    # preprocessor lines
    head = text[:found.start()]
    lines = head[max(head.rfind(c) for c in ";{}") + 1:].split("\n")
    qualifiers = " ".join(line for line in lines if not line.lstrip().startswith("#"))
    return sched_mode_of(name, qualifiers) if "__global__" in qualifiers else 0
