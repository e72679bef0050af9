"""Named launch arguments for host kernels: the C++ ``struct`` is the one declaration of the fields.

A kernel that takes more than a handful of arguments declares them as a plain struct in a header
next to it and takes a pointer to it::

    struct SparseDecodeArgs { uint16_t* out; int64_t q_b, q_s; float sm_scale; KVScopeArgs scope0; };
    DJ_KERNEL(fmla_sparse_decode, "ptr,i64") void fmla_sparse_decode(const SparseDecodeArgs* a, int64_t threads);

Python reads that declaration (types as ``backends.params`` reads a device kernel's parameters) into a
``ctypes.Structure`` laid out as the compiler lays it out, and fills it BY NAME::

    ARGS = descriptors.struct_type(LIB.source("host/launch_args.hpp"), "SparseDecodeArgs")
    kernel(descriptors.pack(ARGS, out=out, q_b=q.stride(0), ...), threads)

Every field must be given exactly once: a name the C++ struct lacks, or a field left out, raises
``TypeError`` naming it, so the two sides cannot drift apart silently. Pointer fields take a CPU tensor,
an address or None; integer and float fields are range- and type-checked as the declared C++ type.

The parser sees plain fields, not what the compiler does with them (a ``#pragma pack``, an attribute
hidden in a macro): ``check_host_layout`` compiles ``offsetof`` of every field and compares it with
ctypes', failing on the first field that differs (the Ascend twin does the same at a kernel's first
launch, ``deepjit.kernel_args``).
"""
from __future__ import annotations

import ctypes
import re

from .backends.params import POINTER, SCALARS, _classify
from .errors import DeepJITError

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _body(text: str, name: str) -> str:
    match = re.search(rf"\bstruct\s+{re.escape(name)}\s*\{{", text)
    if match is None:
        raise DeepJITError(f"no 'struct {name} {{...}}' in the descriptor source")
    depth, start = 1, match.end()
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    raise DeepJITError(f"struct {name}: unbalanced braces")


def declared_fields(source: str, name: str) -> list[tuple[str, str]]:
    """``[(field, kind)]`` of ``struct name`` in ``source``: kind is ``"ptr"``, a key of
    ``params.SCALARS``, or the name of another struct (a nested descriptor)."""
    fields = []
    for decl in _body(_COMMENTS.sub(" ", source), name).split(";"):
        decl = decl.strip()
        if not decl:
            continue
        if "(" in decl or "{" in decl or "[" in decl:
            raise DeepJITError(f"struct {name}: only plain fields are supported, got {decl!r}")
        first, *rest = [part.replace("*", " * ").replace("&", " & ").split() for part in decl.split(",")]
        base = [w for w in first[:-1] if w not in ("*", "&")]           # the type words (C: stars bind to names)
        for declarator in [first] + rest:
            field = declarator[-1]
            pointer = "*" in declarator or "&" in declarator
            fields.append((field, POINTER if pointer else _classify(" ".join(base + [field]))))
    return fields


# Keyed by the source text itself, not a digest of it: a str caches its hash and a dict compares the
# same object by identity, so callers passing the library's cached text each launch pay one lookup,
# and an edited header (a different text) can never be served an old layout.
_TYPES: dict[tuple[str, str], type[ctypes.Structure]] = {}


def struct_type(source: str, name: str) -> type[ctypes.Structure]:
    """The ``ctypes.Structure`` of ``struct name`` declared in ``source`` (memoised per source and name)."""
    key = (source, name)
    cached = _TYPES.get(key)
    if cached is not None:
        return cached
    ctype_fields = []
    for field, kind in declared_fields(source, name):
        if kind == POINTER:
            ctype_fields.append((field, ctypes.c_void_p))
        elif kind in SCALARS:
            ctype_fields.append((field, SCALARS[kind]))
        elif re.search(rf"\bstruct\s+{re.escape(kind)}\s*\{{", source):
            ctype_fields.append((field, struct_type(source, kind)))
        else:
            raise DeepJITError(f"struct {name}: field {field!r} has a type deepjit cannot lay out: {kind!r}")
    cls = type(name, (ctypes.Structure,), {"_fields_": ctype_fields, "__module__": __name__})
    cls._dj_converters = [(f, _converter(name, f, t)) for f, t in ctype_fields]
    cls._dj_names = frozenset(f for f, _ in ctype_fields)
    _TYPES[key] = cls
    return cls


def _converter(struct_name: str, field: str, ctype):
    """The checked conversion of one field's Python value (built once per struct type): ``convert(value,
    keep)`` returns what the struct stores and appends to ``keep`` what must outlive the launch (the
    tensors a pointer field or a nested descriptor names)."""
    where = f"{struct_name}.{field}"
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
        def nested(value, keep):
            if isinstance(value, dict):
                value = pack(ctype, **value)
            elif not isinstance(value, ctype):
                raise TypeError(f"{where}: expected a dict of its fields or a {ctype.__name__}, "
                                f"got {type(value).__name__}")
            keep += getattr(value, "_dj_keep", ())   # copied by value into the parent: its own list is lost
            return value
        return nested
    if ctype is ctypes.c_void_p:
        def pointer(value, keep):
            if value is None or (type(value) is int and value >= 0):
                return value
            if hasattr(value, "data_ptr") and hasattr(value, "device"):
                if value.device.type != "cpu":
                    raise TypeError(f"{where}: expected a CPU tensor, got device {value.device}")
                keep.append(value)
                return value.data_ptr()
            raise TypeError(f"{where}: expected a tensor, an address or None, got {type(value).__name__}")
        return pointer
    if ctype in (ctypes.c_float, ctypes.c_double):
        def real(value, keep):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{where}: expected a float, got {type(value).__name__}")
            return float(value)
        return real
    bits = 8 * ctypes.sizeof(ctype)
    signed = ctype(-1).value == -1
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)

    def integer(value, keep):
        if not isinstance(value, int):
            raise TypeError(f"{where}: expected an int, got {type(value).__name__}")
        if not lo <= value <= hi:
            raise ValueError(f"{where}: expected a value that fits the declared {ctype.__name__.removeprefix('c_')}, "
                             f"got {value}")
        return int(value)
    return integer


def pack(struct_cls: type[ctypes.Structure], **values) -> ctypes.Structure:
    """An instance of ``struct_cls`` with every field set by name (none missing, none unknown)."""
    converters = struct_cls._dj_converters
    if values.keys() != struct_cls._dj_names:
        names = [f for f, _ in converters]
        unknown = sorted(set(values) - set(names))
        missing = [n for n in names if n not in values]
        raise TypeError(f"{struct_cls.__name__}: " + "; ".join(
            part for part in (f"no field {', '.join(unknown)} in the C++ struct" if unknown else "",
                              f"missing {', '.join(missing)}" if missing else "") if part))
    # The struct holds raw addresses: keep the tensors (and those of nested descriptors) alive with it,
    # so a temporary such as ``x.contiguous()`` passed as a field is not freed before the kernel runs.
    keep: list = []
    desc = struct_cls(*[convert(values[f], keep) for f, convert in converters])
    desc._dj_keep = keep
    return desc


def address(desc: ctypes.Structure) -> int:
    """The address to pass for a ``const T*`` descriptor parameter (keep ``desc`` alive for the call)."""
    return ctypes.addressof(desc)


def layout(struct_cls: type[ctypes.Structure], prefix: str = "", base: int = 0) -> list[tuple[str, int, bool]]:
    """``[(dotted field, offset, is_pointer)]`` of every leaf field as ctypes lays the struct out."""
    out = []
    for name, ctype in struct_cls._fields_:
        offset = base + getattr(struct_cls, name).offset
        if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
            out += layout(ctype, f"{prefix}{name}.", offset)
        else:
            out.append((prefix + name, offset, ctype is ctypes.c_void_p))
    return out


def check_layout(where: str, struct_cls: type[ctypes.Structure], compiled: tuple[str, int, list]) -> None:
    """Raises naming the first field where ``struct_cls`` (ctypes) and the compiler's struct
    (``(C++ name, sizeof, [(dotted field, offset)])``) disagree; ``where`` names the kernel or probe."""
    name, size, fields = compiled
    if struct_cls.__name__ != name.rsplit("::", 1)[-1]:
        raise TypeError(f"{where}: expected struct {name}, got a {struct_cls.__name__}")
    ours = {f: off for f, off, _ in layout(struct_cls)}
    theirs = dict(fields)
    for field in dict.fromkeys([*ours, *theirs]):
        if field not in theirs or field not in ours:
            side = "the compiled" if field not in theirs else "the Python (ctypes)"
            raise DeepJITError(f"{where}: {name}.{field} is missing from {side} struct: header and Python disagree")
        if ours[field] != theirs[field]:
            raise DeepJITError(f"{where}: {name}.{field} is at byte {theirs[field]} as compiled but at {ours[field]} "
                               f"in the Python (ctypes) layout (a packing or alignment the descriptor parser does "
                               f"not see)")
    if ctypes.sizeof(struct_cls) != size:
        raise DeepJITError(f"{where}: sizeof({name}) is {size} as compiled but {ctypes.sizeof(struct_cls)} in the "
                           f"Python (ctypes) layout")


def check_host_layout(library, relative_header: str, cpp_type: str) -> type[ctypes.Structure]:
    """``struct_type`` of ``cpp_type`` (``ns::Name``) from the package header ``relative_header``, after
    checking it against the host compiler's layout (a probe of ``sizeof`` and every ``offsetof``)."""
    name = cpp_type.rsplit("::", 1)[-1]
    struct_cls = struct_type(library.source(relative_header), name)
    fields = [f for f, _, _ in layout(struct_cls)]
    package = library.package_dir.rstrip("/").rsplit("/", 1)[-1]
    stores = "".join(f"  out[{i + 1}] = offsetof({cpp_type}, {f});\n" for i, f in enumerate(fields))
    probe = (f"#include <cstddef>\n#include <cstdint>\n#include <deepjit/host/kernel.hpp>\n"
             f"#include <{package}/{relative_header}>\n"
             f'DJ_KERNEL(dj_layout_probe, "ptr") void dj_layout_probe(uint64_t* out) {{\n'
             f"  out[0] = sizeof({cpp_type});\n{stores}}}\n")
    out = (ctypes.c_uint64 * (len(fields) + 1))()
    library.host_runtime.compile("dj_layout_probe", probe)(ctypes.addressof(out))
    compiled = (cpp_type, out[0], list(zip(fields, out[1:], strict=True)))
    check_layout(f"layout probe of {relative_header}", struct_cls, compiled)
    return struct_cls
