"""A damaged cache entry is never run: each artifact's SHA-256 in meta.json is checked before a hit is
loaded, and a mismatch (a byte run overwritten mid-file, a truncation, garbage) or a load failure moves
the entry aside into tmp/ and rebuilds it once, with a warning."""
import json
import os

import pytest

from deepjit.disk_cache import DIGESTS_KEY, verify
from deepjit.errors import DeepJITError

from .helpers import ADD_SOURCE, list_tmp, make_runtime, wrap_cxx


def _add(kernel) -> int:
    import ctypes
    out = (ctypes.c_int64 * 1)()
    kernel(ctypes.addressof(out), 40, 2)
    return out[0]


def _built(tmp_path, monkeypatch) -> str:
    # Not loaded here: dlopen would hand this process the damaged mapping back by its path.
    path = make_runtime(tmp_path, monkeypatch).compile_without_load("add_i64", ADD_SOURCE)
    assert verify(path) is None
    return path


def _overwrite_middle(so):
    size = os.path.getsize(so)
    with open(so, "r+b") as f:  # ELF header and section table stay intact
        f.seek(size // 2)
        f.write(b"\xcc" * 256)


def _truncate(so):
    os.truncate(so, 100)


def _garbage(so):
    size = os.path.getsize(so)
    with open(so, "wb") as f:
        f.write(os.urandom(size))


@pytest.mark.parametrize("damage", [_overwrite_middle, _truncate, _garbage], ids=["middle", "truncated", "garbage"])
def test_damaged_binary_is_set_aside_and_rebuilt(tmp_path, monkeypatch, damage):
    path = _built(tmp_path, monkeypatch)
    damage(os.path.join(path, "kernel.so"))
    assert "kernel.so does not match its SHA-256" in verify(path)
    rt = make_runtime(tmp_path, monkeypatch)  # a fresh process's view: empty memory cache
    with pytest.warns(RuntimeWarning, match="kernel.so does not match its SHA-256; moved it to .*corrupt"):
        kernel = rt.compile("add_i64", ADD_SOURCE)
    assert _add(kernel) == 42
    assert verify(path) is None  # republished at the same path
    assert [n for n in list_tmp(tmp_path / "cache") if n.endswith(".corrupt")]


def test_changed_source_artifact_and_legacy_entry_are_rebuilt(tmp_path, monkeypatch):
    path = _built(tmp_path, monkeypatch)
    with open(os.path.join(path, "kernel.cpp"), "a") as f:
        f.write("// edited\n")
    with pytest.warns(RuntimeWarning, match="kernel.cpp does not match"):
        assert make_runtime(tmp_path, monkeypatch).compile_without_load("add_i64", ADD_SOURCE) == path
    # an entry without digests (built before they were recorded) cannot be checked: rebuilt
    meta_path = os.path.join(path, "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    del meta[DIGESTS_KEY]
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    with pytest.warns(RuntimeWarning, match="no artifact digests"):
        assert _add(make_runtime(tmp_path, monkeypatch).compile("add_i64", ADD_SOURCE)) == 42
    assert verify(path) is None


def test_load_failure_with_matching_digests_is_rebuilt_once(tmp_path, monkeypatch):
    path = _built(tmp_path, monkeypatch)
    so = os.path.join(path, "kernel.so")
    _truncate(so)
    meta_path = os.path.join(path, "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    from deepjit.disk_cache import artifact_digests
    meta[DIGESTS_KEY] = artifact_digests(path)  # digests that match the damage: only loading can tell
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    with pytest.warns(RuntimeWarning, match="failed to load"):
        assert _add(make_runtime(tmp_path, monkeypatch).compile("add_i64", ADD_SOURCE)) == 42


def test_an_entry_that_never_loads_is_rebuilt_once_then_raises(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("TST_JIT_CXX", wrap_cxx(tmp_path / "cxx", f"open({str(calls)!r}, 'a').write('x')"))
    two = ADD_SOURCE + ADD_SOURCE.replace("add_i64", "add_again")  # two kernels: refused on every load
    with pytest.raises(DeepJITError, match="exactly one kernel"):
        make_runtime(tmp_path, monkeypatch).compile("two", two)
    with pytest.warns(RuntimeWarning, match="failed to load"), pytest.raises(DeepJITError, match="exactly one kernel"):
        make_runtime(tmp_path, monkeypatch).compile("two", two)
    assert calls.read_text() == "xx"  # the first build and one rebuild, no loop
