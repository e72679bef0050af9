"""Shared pieces of the deepjit tests: runtimes on private cache roots, tiny kernels, fake tools."""
from __future__ import annotations

import os
import stat
import sys
import textwrap

import deepjit

# A one-line kernel: out[0] = a + b. Cheap to compile, enough to prove a binary was built and loads.
ADD_SOURCE = r"""
#include <deepjit/host/kernel.hpp>
DJ_KERNEL(add_i64, "ptr,i64,i64") void add_i64(int64_t* out, int64_t a, int64_t b) { out[0] = a + b; }
"""


def make_runtime(tmp_path, monkeypatch, prefix: str = "TST", backend: str = "host", cache=None, **config):
    """A runtime whose cache lives under ``tmp_path`` (or ``cache``, a ':'-separated root list)."""
    monkeypatch.setenv(f"{prefix}_JIT_CACHE_DIR", str(cache or tmp_path / "cache"))
    root = config.pop("root", str(tmp_path))
    return deepjit.Runtime(deepjit.Config(root, prefix, **config), backend)


def write_script(path, body: str) -> str:
    """An executable Python script run by this interpreter (for fake compilers and toolkits)."""
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\n" + textwrap.dedent(body))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def wrap_cxx(path, before_compile: str) -> str:
    """A C++ compiler wrapper: ``--version`` answers like the real one (same cache key); any other
    call runs ``before_compile`` (Python, with ``argv``), then execs the real compiler."""
    import shutil
    real = shutil.which("g++") or shutil.which("c++")
    return write_script(path, f"""
        import os, sys, time
        argv = sys.argv[1:]
        if argv == ["--version"]:
            os.execv({real!r}, [{real!r}] + argv)
        {textwrap.indent(textwrap.dedent(before_compile), '        ').strip()}
        os.execv({real!r}, [{real!r}] + argv)
    """)


def list_entries(cache_root) -> list[str]:
    folder = os.path.join(str(cache_root), "cache")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def list_tmp(cache_root) -> list[str]:
    folder = os.path.join(str(cache_root), "tmp")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []
