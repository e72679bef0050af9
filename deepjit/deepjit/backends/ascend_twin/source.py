"""AscendC source as the twin compiles it: on-chip null-pointer literals rewritten to the current
core's memories, the ``extern "C" __global__`` entry parsed (name, core type, parameters), and the
launcher that reads the packed arguments and runs the entry on every core."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ... import descriptors
from ...errors import DeepJITError
from ...include_parser import scan_include
from ..params import ENTRY_RE, SCALARS, sched_mode_of, strip_comments

# (QUAL T *)0 -> (QUAL T *)::dj_twin::onchip_base(::dj_twin::Mem::X): generated code and TileLang's
# headers place on-chip buffers at absolute offsets from 0.
_MEMORY_OF = {"__ubuf__": "UB", "__cbuf__": "L1", "__ca__": "L0A", "__cb__": "L0B", "__cc__": "L0C"}
_NULL_RE = re.compile(r"\(\s*(__ubuf__|__cbuf__|__ca__|__cb__|__cc__)(\s+[\w:<>, ]+?\s*\*)\s*\)\s*0(?![\w.])")
# Names whose use makes SIMT lanes run as fibers (a barrier or a cross-lane exchange).
_LANE_SYNC_RE = re.compile(r"\b(asc_syncthreads|__syncthreads|asc_shfl\w*|__shfl\w*|AscendAllReduce|asc_ballot|"
                           r"asc_activemask|asc_reduce_(?:add|max|min))\b")
KINDS = {"vector": "Vector", "cube": "Cube", "mix": "Mix"}


def rewrite_onchip_nulls(text: str) -> str:
    return _NULL_RE.sub(lambda m: f"({m.group(1)}{m.group(2)})::dj_twin::onchip_base(::dj_twin::Mem::"
                                  f"{_MEMORY_OF[m.group(1)]})", text)


def uses_lane_sync(text: str) -> bool:
    return _LANE_SYNC_RE.search(text) is not None


@dataclass(frozen=True)
class Param:
    type: str
    name: str


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str          # "vector" | "cube" | "mix"
    params: tuple
    sched_mode: int = 0  # __schedmode__: 0 normal, 1 batch (every block starts at once)


def _split_params(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip() and p.strip() != "void"]


def parse_entry(source: str) -> Entry:
    """The one ``extern "C" __global__`` kernel: its name, core type and parameter list."""
    source = strip_comments(source)
    matches = list(ENTRY_RE.finditer(source))
    if len(matches) != 1:
        raise DeepJITError(f'expected exactly one extern "C" __global__ entry point in the AscendC source, '
                           f"found {len(matches)}")
    m = matches[0]
    qualifiers, name = m.group(1), m.group(2)
    kinds = [k for k in KINDS if f"__{k}__" in qualifiers]
    if len(kinds) != 1:
        raise DeepJITError(f"kernel {name}: cannot tell its core type from {qualifiers.strip()!r}; "
                           f"mark it __vector__, __cube__ or __mix__(1, 2)")
    if kinds[0] == "mix" and not re.search(r"__mix__\s*\(\s*1\s*,\s*2\s*\)", qualifiers):
        raise DeepJITError(f"kernel {name}: only __mix__(1, 2) (one cube and two vector cores per block) is "
                           f"implemented on the twin, got {qualifiers.strip()!r}")
    sched_mode = sched_mode_of(name, qualifiers)
    depth, i = 1, m.end()
    while i < len(source) and depth:
        depth += {"(": 1, ")": -1}.get(source[i], 0)
        i += 1
    params = []
    for text in _split_params(source[m.end():i - 1]):
        pm = re.fullmatch(r"(.*?[\s*&])(\w+)", text, re.S)
        if pm is None:
            raise DeepJITError(f"kernel {name}: cannot parse parameter {text!r}")
        params.append(Param(" ".join(pm.group(1).split()), pm.group(2)))
    return Entry(name, kinds[0], tuple(params), sched_mode)



@dataclass(frozen=True)
class ArgsStruct:
    """The struct an entry taking ``__gm__ const T* args`` reads: its C++ type and leaf fields in order,
    ``(dotted name, is_pointer)``, as ``deepjit.descriptors`` reads the header."""
    cpp_type: str
    fields: tuple


_NOT_TYPE_WORDS = {"__gm__", "const", "volatile", "struct", "__restrict__", "__restrict"}
_ELEMENT_TYPES = {"void", "half", "bfloat16_t", "float16_t", "float32_t", "hifloat8_t", "fp8_e4m3fn_t", "fp8_e5m2_t",
                  "fp4x2_e2m1_t", "fp4x2_e1m2_t", "fp8_e8m0_t"}


def _with_includes(source: str, include_dirs, seen: set) -> str:
    """``source`` followed by every header it includes (transitively) that ``include_dirs`` hold."""
    texts = [source]
    for line in source.splitlines():
        try:
            name = scan_include(line)
        except DeepJITError:  # a quoted include (TileLang's own templates have them): no struct home
            continue
        for folder in include_dirs if name and name not in seen else ():
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                seen.add(name)
                with open(path) as f:
                    texts.append(_with_includes(f.read(), include_dirs, seen))
                break
    return "\n".join(texts)


def args_struct(entry: Entry, source: str, include_dirs) -> ArgsStruct | None:
    """The argument struct of an entry whose one parameter points to a struct declared in ``source`` or
    its headers; None for any other entry."""
    if len(entry.params) != 1 or "*" not in entry.params[0].type:
        return None
    words = [w for w in entry.params[0].type.replace("*", " ").split() if w not in _NOT_TYPE_WORDS]
    if len(words) != 1 or not re.fullmatch(r"[\w:]+", words[0]):
        return None
    cpp_type = words[0]
    name = cpp_type.rsplit("::", 1)[-1]
    if name in SCALARS or name in _ELEMENT_TYPES:
        return None                      # a pointer to data, not to an argument struct
    text = _with_includes(source, include_dirs, set())
    if not re.search(rf"\bstruct\s+{re.escape(name)}\s*\{{", text):
        return None                      # a pointer to a scalar or to a type declared elsewhere
    cls = descriptors.struct_type(text, name)
    return ArgsStruct(cpp_type, tuple((f, ptr) for f, _, ptr in descriptors.layout(cls)))


def _args_code(entry: Entry, args: ArgsStruct | None) -> tuple[str, str]:
    """(exports, relocations): the struct's layout as the compiler lays it out (for the first-launch
    check against ctypes) and, per pointer field, its address moved into the guarded copy of its tensor."""
    if args is None:
        return ('extern "C" const char dj_twin_args_struct[] = "";\n'
                'extern "C" const char dj_twin_args_fields[] = "";\n'
                'extern "C" const uint64_t dj_twin_args_layout[] = {0};\n'), ""
    t = args.cpp_type
    offsets = "".join(f", offsetof({t}, {f})" for f, _ in args.fields)
    exports = (f'extern "C" const char dj_twin_args_struct[] = "{t}";\n'
               f'extern "C" const char dj_twin_args_fields[] = "{";".join(f for f, _ in args.fields)}";\n'
               f'extern "C" const uint64_t dj_twin_args_layout[] = {{sizeof({t}){offsets}}};\n')
    param = entry.params[0].name
    relocations = "".join(f'    r.relocate(a0, offsetof({t}, {f}), "{param}.{f}");\n' for f, ptr in args.fields if ptr)
    return exports, relocations


def launcher(entry: Entry, kernel_file: str, args: ArgsStruct | None = None) -> str:
    """C++ that includes the kernel and exports ``dj_twin_launch`` for it."""
    exports, relocations = _args_code(entry, args)
    reads = "".join(f'    auto a{i} = r.arg<{p.type}>("{p.name}");\n' for i, p in enumerate(entry.params))
    reads += relocations
    call = ", ".join(f"a{i}" for i in range(len(entry.params)))
    capture = "=" if entry.params else ""
    return f'''// Generated by deepjit's Ascend twin toolchain: the launcher of {entry.name}.
#include <cstddef>
// launch() and the C entry points come from the prelude's launch.o; included before the kernel, so that no
// macro of the kernel's changes what this header declares against what launch.o was compiled from
#define DJ_TWIN_LAUNCH_EXTERNAL 1
#include <dj_twin/launch.h>
#include "{kernel_file}"

extern "C" const char dj_twin_kernel_name[] = "{entry.name}";
extern "C" const char dj_twin_kernel_kind[] = "{entry.kind}";
extern "C" const int dj_twin_sched_mode = {entry.sched_mode};
extern "C" const int dj_twin_abi_version = ::dj_twin::kAbiVersion;
extern "C" const int dj_twin_counter_words = ::dj_twin::kCounterWords;
{exports}
extern "C" int dj_twin_launch(uint32_t num_blocks, const uint8_t* args, size_t args_len, const uint64_t* tensor_addr,
                              const uint64_t* tensor_bytes, int n_tensors, double timeout_s,
                              double launch_timeout_s, char* err, size_t err_len, uint64_t* counters) {{
  return ::dj_twin::launch("{entry.name}", ::dj_twin::KernelKind::{KINDS[entry.kind]}, num_blocks, args, args_len,
                           tensor_addr, tensor_bytes, n_tensors, timeout_s, launch_timeout_s, err, err_len, counters,
                           [](::dj_twin::ArgReader& r) -> std::function<void()> {{
{reads}    return [{capture}]() {{ {entry.name}({call}); }};
  }});
}}
'''
