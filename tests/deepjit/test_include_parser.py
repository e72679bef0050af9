"""Include tracking: which includes are followed, what changes the key, cycles, quoted includes."""
import os

import pytest

from deepjit import IncludeParser
from deepjit.errors import DeepJITError
from deepjit.include_parser import scan_include

from .helpers import make_runtime


def write(root, rel, text):
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


@pytest.mark.parametrize("line, name", [
    ("#include <lib/a.hpp>", "lib/a.hpp"),
    ("   #  include   <lib/a.hpp>  // trailing", "lib/a.hpp"),
    ("\t\f\v#include<lib/a.hpp>", "lib/a.hpp"),
    ("#include FOO_HEADER", None),
    ("#include /*c*/ <lib/a.hpp>", None),
    ("// #include <lib/a.hpp>", None),
    ("#define include <x>", None),
    ("#include <lib/a.hpp", None),
    ("#include_next <lib/a.hpp>", None),
])
def test_line_scanner(line, name):
    assert scan_include(line) == name


@pytest.mark.parametrize("line", ['#include "lib/a.hpp"', '#include "stdio.h"', "#include <lib/a.hpp\"",
                                  "#include <>", "#include < lib/a.hpp>", "#include <lib/a.hpp >"])
def test_non_standard_includes_are_rejected(line):
    with pytest.raises(DeepJITError, match="non-standard include"):
        scan_include(line)


def test_only_prefixed_includes_are_tracked(tmp_path):
    write(tmp_path, "lib/a.hpp", "int a;\n")
    parser = IncludeParser([str(tmp_path)], ["lib/"])
    base = parser.parse_into_hash("#include <vector>\n#include <other/x.hpp>\n")
    assert base == IncludeParser([], []).parse_into_hash("#include <vector>\n#include <other/x.hpp>\n")
    assert parser.parse_into_hash("#include <lib/a.hpp>\n") != IncludeParser([str(tmp_path)], []).parse_into_hash(
        "#include <lib/a.hpp>\n")


def _tree(root, offset="1", third_party="7"):
    write(root, "lib/kernel.hpp", "#pragma once\n#include <lib/detail/offset.hpp>\n#include <third_party/dep.hpp>\n")
    write(root, "lib/detail/offset.hpp", f"#pragma once\nconstexpr int kOffset = {offset};\n")
    write(root, "third_party/dep.hpp", f"constexpr int kDep = {third_party};\n")


SOURCE = "#include <lib/kernel.hpp>\nint main() { return kOffset; }\n"


def key_for(tmp_path, monkeypatch, include_root, prefixes=("lib/",)):
    rt = make_runtime(tmp_path, monkeypatch, include_dirs=[str(include_root)], include_prefixes=list(prefixes))
    return rt.cache_key(SOURCE)


def test_tracked_header_changes_key_transitively_untracked_and_relocated_do_not(tmp_path, monkeypatch):
    _tree(tmp_path / "original")
    _tree(tmp_path / "same_content_elsewhere")
    _tree(tmp_path / "changed", offset="2")
    _tree(tmp_path / "third_party_changed", third_party="8")
    original = key_for(tmp_path, monkeypatch, tmp_path / "original")
    assert key_for(tmp_path, monkeypatch, tmp_path / "same_content_elsewhere") == original
    assert key_for(tmp_path, monkeypatch, tmp_path / "changed") != original
    assert key_for(tmp_path, monkeypatch, tmp_path / "third_party_changed") == original
    # tracking third_party/ too makes its content matter
    assert key_for(tmp_path, monkeypatch, tmp_path / "third_party_changed", ("lib/", "third_party/")) != \
        key_for(tmp_path, monkeypatch, tmp_path / "original", ("lib/", "third_party/"))


def test_one_byte_deep_in_a_generated_chain(tmp_path):
    def chain(root, last):
        for i in range(64):
            body = f"#include <gen/h{i + 1}.hpp>\n" if i < 63 else f"constexpr int kLast = {last};\n"
            write(root, f"gen/h{i}.hpp", "#pragma once\n" + body)
        return IncludeParser([str(root)], ["gen/"]).parse_into_hash("#include <gen/h0.hpp>\n")

    assert chain(tmp_path / "a", 1) == chain(tmp_path / "b", 1)
    assert chain(tmp_path / "a2", 1) != chain(tmp_path / "b2", 2)


def test_include_dir_order_decides_the_copy(tmp_path):
    write(tmp_path / "first", "lib/a.hpp", "int a = 1;\n")
    write(tmp_path / "second", "lib/a.hpp", "int a = 2;\n")
    code = "#include <lib/a.hpp>\n"
    ab = IncludeParser([str(tmp_path / "first"), str(tmp_path / "second")], ["lib/"]).parse_into_hash(code)
    ba = IncludeParser([str(tmp_path / "second"), str(tmp_path / "first")], ["lib/"]).parse_into_hash(code)
    only_first = IncludeParser([str(tmp_path / "first")], ["lib/"]).parse_into_hash(code)
    assert ab != ba and ab == only_first


def test_cycle_is_rejected_and_state_is_clean(tmp_path):
    write(tmp_path, "lib/entry.hpp", "#pragma once\n#include <lib/dependency.hpp>\n")
    write(tmp_path, "lib/dependency.hpp", "#pragma once\n#include <lib/entry.hpp>\n")
    parser = IncludeParser([str(tmp_path)], ["lib/"])
    with pytest.raises(DeepJITError, match="circular include may occur: lib/entry.hpp"):
        parser.parse_into_hash("#include <lib/entry.hpp>\n")
    assert parser._visiting == set()


def test_missing_header_fails_then_recovers(tmp_path):
    parser = IncludeParser([str(tmp_path)], ["lib/"])
    code = "#if 0\n#include <lib/late.hpp>\n#endif\n/*\n#include <lib/late.hpp>\n*/\n"
    with pytest.raises(DeepJITError, match="failed to open: .*lib/late.hpp"):
        parser.parse_into_hash(code)  # lines in #if 0 and comments are still scanned
    write(tmp_path, "lib/late.hpp", "int late;\n")
    assert len(parser.parse_into_hash(code)) == 32


def test_binary_bytes_are_hashed(tmp_path):
    write(tmp_path, "lib/a.hpp", "x")
    with open(tmp_path / "lib" / "b.hpp", "wb") as f:
        f.write(b"\xff\xfe\0bin")
    parser = IncludeParser([str(tmp_path)], ["lib/"])
    assert parser.parse_into_hash(b"\xff#include <lib/b.hpp>\n") != parser.parse_into_hash(b"\xfe#include <lib/b.hpp>\n")
    assert parser.parse_into_hash("#include <lib/a.hpp>\n") != parser.parse_into_hash("#include <lib/b.hpp>\n")


def test_memo_means_edits_after_first_hash_are_not_seen(tmp_path):
    path = write(tmp_path, "lib/a.hpp", "int a = 1;\n")
    parser = IncludeParser([str(tmp_path)], ["lib/"])
    first = parser.parse_into_hash("#include <lib/a.hpp>\n")
    with open(path, "w") as f:
        f.write("int a = 2;\n")
    assert parser.parse_into_hash("#include <lib/a.hpp>\n") == first
    assert IncludeParser([str(tmp_path)], ["lib/"]).parse_into_hash("#include <lib/a.hpp>\n") != first
