"""A minimal ELF64 little-endian reader: section names and exported dynamic symbols.

Used for Ascend kernel-name discovery (``.ascend.meta.<name>`` sections) and for the host
toolchain's kernel discovery (exported ``<name>__dj_signature`` symbols), without any toolkit.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import DeepJITError

ASCEND_META_PREFIX = ".ascend.meta."
_SHN_XINDEX = 0xFFFF
_SHT_DYNSYM = 11
_STB_GLOBAL, _STB_WEAK = 1, 2
STT_FUNC, STT_OBJECT = 2, 1
_STV_DEFAULT = 0
_SHN_UNDEF = 0


@dataclass
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int


def _fail(path: str, why: str):
    raise DeepJITError(f"invalid ELF file {path}: {why}")


def read_sections(path: str) -> tuple[bytes, list[Section]]:
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 64 or data[:4] != b"\x7fELF":
        _fail(path, "bad magic")
    if data[4] != 2:
        _fail(path, "not ELF64")
    if data[5] != 1:
        _fail(path, "not little-endian")
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if e_shoff == 0:
        return data, []
    if e_shentsize != 64:
        _fail(path, f"unexpected section header size {e_shentsize}")

    def header(i):
        off = e_shoff + i * 64
        if off + 64 > len(data):
            _fail(path, "section header out of bounds")
        return struct.unpack_from("<IIQQQQIIQQ", data, off)

    if e_shnum == 0:
        e_shnum = header(0)[5]  # sh_size of section 0 holds the real count
    if e_shstrndx == _SHN_XINDEX:
        e_shstrndx = header(0)[6]  # sh_link of section 0
    raw = [header(i) for i in range(e_shnum)]
    if not 0 <= e_shstrndx < e_shnum:
        _fail(path, "string table index out of range")
    str_off, str_size = raw[e_shstrndx][4], raw[e_shstrndx][5]
    if str_off + str_size > len(data):
        _fail(path, "string table out of bounds")
    strtab = data[str_off:str_off + str_size]
    sections = []
    for h in raw:
        name_off = h[0]
        end = strtab.find(b"\0", name_off)
        if name_off >= len(strtab) or end < 0:
            _fail(path, "section name out of bounds")
        sections.append(Section(strtab[name_off:end].decode("latin-1"), h[1], h[4], h[5], h[6], h[9]))
    return data, sections


def ascend_kernel_names(path: str) -> list[str]:
    """Kernel names from ``.ascend.meta.*`` sections, mixed-kernel suffixes folded, sorted, unique."""
    _, sections = read_sections(path)
    names = set()
    for s in sections:
        if s.name.startswith(ASCEND_META_PREFIX):
            n = s.name[len(ASCEND_META_PREFIX):]
            for suffix in ("_mix_aic", "_mix_aiv"):
                if n.endswith(suffix):
                    n = n[: -len(suffix)]
                    break
            if n:
                names.add(n)
    return sorted(names)


def exported_symbols(path: str, kinds=(STT_FUNC, STT_OBJECT)) -> dict[str, int]:
    """Defined, global (or weak), default-visibility dynamic symbols -> their ``STT_*`` type."""
    data, sections = read_sections(path)
    out = {}
    for s in sections:
        if s.type != _SHT_DYNSYM or s.entsize != 24:
            continue
        if s.link >= len(sections) or s.offset + s.size > len(data):
            _fail(path, "dynamic symbol table out of bounds")
        strs = sections[s.link]
        strtab = data[strs.offset:strs.offset + strs.size]
        for off in range(s.offset, s.offset + s.size, 24):
            st_name, st_info, st_other, st_shndx = struct.unpack_from("<IBBH", data, off)
            bind, typ = st_info >> 4, st_info & 0xF
            if bind not in (_STB_GLOBAL, _STB_WEAK) or (st_other & 3) != _STV_DEFAULT or st_shndx == _SHN_UNDEF:
                continue
            if typ not in kinds:
                continue
            end = strtab.find(b"\0", st_name)
            out[strtab[st_name:end].decode("latin-1")] = typ
    return out


def expect_one_kernel(names: list[str], path: str) -> str:
    if len(names) != 1:
        raise DeepJITError(f"expected exactly one kernel in {path}, found {len(names)}")
    return names[0]
