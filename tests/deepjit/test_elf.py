"""ELF reading: Ascend kernel names from ``.ascend.meta.*`` sections (objects built with the host
compiler) and exported symbols of shared objects; malformed files are rejected."""
import shutil
import struct
import subprocess

import pytest

from deepjit import elf
from deepjit.errors import DeepJITError

CC = shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="needs a host C compiler to build ELF objects")


def object_with_sections(tmp_path, sections, name="k.o"):
    lines = [f'__attribute__((section("{s}"), used)) static const char s{i}[] = "meta";'
             for i, s in enumerate(sections)]
    src = tmp_path / (name + ".c")
    src.write_text("\n".join(lines) + "\nint unrelated(void) { return 0; }\n")
    out = tmp_path / name
    subprocess.run([CC, "-c", str(src), "-o", str(out)], check=True)
    return str(out)


@pytest.mark.parametrize("sections, names", [
    ([".ascend.meta.vector_add"], ["vector_add"]),
    ([".ascend.meta.gemm_mix_aic", ".ascend.meta.gemm_mix_aiv"], ["gemm"]),
    ([".ascend.meta.a_mix_aic_mix_aiv"], ["a_mix_aic"]),  # only one suffix is stripped
    ([], []),
    ([".text.other", ".ascend.metadata", ".ascend.meta"], []),
    ([".ascend.meta.zeta", ".ascend.meta.alpha"], ["alpha", "zeta"]),
])
def test_ascend_kernel_names(tmp_path, sections, names):
    assert elf.ascend_kernel_names(object_with_sections(tmp_path, sections)) == names


def test_exactly_one_kernel_message(tmp_path):
    path = object_with_sections(tmp_path, [".ascend.meta.a", ".ascend.meta.b"])
    with pytest.raises(DeepJITError, match=f"expected exactly one kernel in {path}, found 2"):
        elf.expect_one_kernel(elf.ascend_kernel_names(path), path)
    with pytest.raises(DeepJITError, match="found 0"):
        elf.expect_one_kernel([], path)


def test_exported_symbols_of_a_shared_object(tmp_path):
    src = tmp_path / "lib.c"
    src.write_text("int exported(void) { return 1; }\n"
                   "const char exported_data[] = \"x\";\n"
                   "static int local_fn(void) { return 2; }\n"
                   "__attribute__((visibility(\"hidden\"))) int hidden_fn(void) { return local_fn(); }\n"
                   "extern int undefined_fn(void); int caller(void) { return undefined_fn(); }\n")
    so = tmp_path / "lib.so"
    subprocess.run([CC, "-shared", "-fPIC", str(src), "-o", str(so)], check=True)
    symbols = elf.exported_symbols(str(so))
    assert symbols["exported"] == elf.STT_FUNC and symbols["caller"] == elf.STT_FUNC
    assert symbols["exported_data"] == elf.STT_OBJECT
    assert not {"local_fn", "hidden_fn", "undefined_fn"} & set(symbols)


def test_extended_string_table_index(tmp_path):
    # With more than 0xff00 sections the ELF header holds SHN_XINDEX and section 0's sh_link the
    # real index; rewrite a small object that way instead of building 65k sections.
    path = object_with_sections(tmp_path, [".ascend.meta.extended"])
    data = bytearray(open(path, "rb").read())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shstrndx, = struct.unpack_from("<H", data, 0x3E)
    struct.pack_into("<H", data, 0x3E, 0xFFFF)
    struct.pack_into("<I", data, shoff + 40, shstrndx)  # sh_link of section 0
    (tmp_path / "x.o").write_bytes(bytes(data))
    assert elf.ascend_kernel_names(str(tmp_path / "x.o")) == ["extended"]


def corrupt(tmp_path, mutate):
    good = object_with_sections(tmp_path, [".ascend.meta.k"])
    data = bytearray(open(good, "rb").read())
    mutate(data)
    bad = tmp_path / "bad.o"
    bad.write_bytes(bytes(data))
    return str(bad)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.__setitem__(slice(0, 4), b"\x7fELG"), "bad magic"),
    (lambda d: d.__setitem__(4, 1), "not ELF64"),
    (lambda d: d.__setitem__(5, 2), "not little-endian"),
    (lambda d: d.__setitem__(slice(0x3A, 0x3C), struct.pack("<H", 40)), "unexpected section header size"),
    (lambda d: d.__setitem__(slice(0x28, 0x30), struct.pack("<Q", 1 << 40)), "out of bounds"),
    (lambda d: d.__setitem__(slice(0x3E, 0x40), struct.pack("<H", 0xFFF0)), "string table index out of range"),
    (lambda d: d.__delitem__(slice(100, None)), "out of bounds"),
])
def test_malformed_files_are_rejected(tmp_path, mutate, message):
    with pytest.raises(DeepJITError, match=message):
        elf.ascend_kernel_names(corrupt(tmp_path, mutate))


def test_tiny_file_is_rejected(tmp_path):
    (tmp_path / "tiny").write_bytes(b"\x7fELF")
    with pytest.raises(DeepJITError, match="bad magic"):
        elf.read_sections(str(tmp_path / "tiny"))
