"""Shared pieces of the deepjit tests: runtimes on private cache roots, tiny kernels, fake tools."""
from __future__ import annotations

import os
import stat
import struct
import sys
import textwrap

import numpy as np

import deepjit

# A one-line kernel: out[0] = a + b. Cheap to compile, enough to prove a binary was built and loads.
ADD_SOURCE = r"""
#include <deepjit/host/kernel.hpp>
DJ_KERNEL(add_i64, "ptr,i64,i64") void add_i64(int64_t* out, int64_t a, int64_t b) { out[0] = a + b; }
"""


def reference_hex(*components: bytes) -> str:
    """An independent transcription of the spec with numpy uint64 wrap-around arithmetic."""
    with np.errstate(over="ignore"):
        lanes = [np.uint64(0xC6A4A7935BD1E995), np.uint64(0xFF51AFD7ED558CCD)]
        mults = [np.uint64(0x100000001B3), np.uint64(0x9E3779B97F4A7C15)]
        for c in components:
            for byte in struct.pack("<Q", len(c)) + c:
                lanes = [(lane ^ np.uint64(byte)) * m for lane, m in zip(lanes, mults, strict=True)]
        out = ""
        for v in lanes:
            v = v ^ (v >> np.uint64(30))
            v = v * np.uint64(0xBF58476D1CE4E5B9)
            v = v ^ (v >> np.uint64(27))
            v = v * np.uint64(0x94D049BB133111EB)
            v = v ^ (v >> np.uint64(31))
            out += f"{int(v):016x}"
    return out


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


def make_fake_ascend_toolkit(home) -> str:
    """A CANN look-alike: ``bin/bisheng`` builds a host object carrying one ``.ascend.meta.<name>``
    section per ``__global__`` entry (``_mix_aic``/``_mix_aiv`` for ``__mix__``), or exported
    ``<name>``/``<name>_interface`` functions in AICPU mode; ``bin/ld.lld`` copies (or links a
    shared object). Both log their argv and cwd to ``<home>/calls.jsonl``."""
    import shutil
    home = str(home)
    cc = shutil.which("gcc") or shutil.which("cc")
    os.makedirs(os.path.join(home, "aarch64-linux", "asc", "include", "adv_api"), exist_ok=True)
    log = os.path.join(home, "calls.jsonl")
    common = f"""
        import json, os, re, shutil, subprocess, sys
        argv = sys.argv[1:]
        def log(tool):
            with open({log!r}, "a") as f:
                f.write(json.dumps({{"tool": tool, "argv": argv, "cwd": os.getcwd()}}) + "\\n")
    """
    write_script(os.path.join(home, "bin", "bisheng"), common + f"""
        if argv == ["--version"]:
            print("fake bisheng 9.9 (deepjit tests)")
            sys.exit(0)
        log("bisheng")
        src = next(a for a in argv if a.endswith(".asc"))
        out = argv[argv.index("-o") + 1]
        code = open(src).read()
        if "#error" in code:
            print(src + ":1:2: error: deliberately broken")
            sys.exit(1)
        if "-save-temps" in argv:
            open("kernel.asci", "w").write(code)
        if "-S" in argv:
            open(out, "w").write("// assembly\\n")
            sys.exit(0)
        lines = []
        code = re.sub(r"__schedmode__\\s*\\([^)]*\\)", " ", code)
        for i, m in enumerate(re.finditer(r"__global__\\s+(__mix__\\s*\\([^)]*\\)\\s*)?[^(;]*?(\\w+)\\s*\\(", code)):
            name = m.group(2)
            if "--cce-aicpu-only" in argv:
                lines.append(f"int {{name}}(void) {{{{ return 0; }}}} int {{name}}_interface(void) {{{{ return 0; }}}}")
                continue
            for suffix in (["_mix_aic", "_mix_aiv"] if m.group(1) else [""]):
                lines.append(f'__attribute__((section(".ascend.meta.{{name}}{{suffix}}"), used)) '
                             f'static const char m{{i}}{{suffix}}[] = "meta";')
        stub = out + ".c"
        open(stub, "w").write("\\n".join(lines) + "\\nint fake_marker;\\n")
        subprocess.run([{cc!r}, "-fPIC", "-c", stub, "-o", out], check=True)
        os.unlink(stub)
    """)
    write_script(os.path.join(home, "bin", "ld.lld"), common + f"""
        if argv == ["--version"]:
            print("fake LLD 9.9 (compatible with GNU linkers)")
            sys.exit(0)
        log("ld.lld")
        rel = next(a for a in argv if a.endswith(".rel.o"))
        out = argv[argv.index("-o") + 1]
        if "-shared" in argv:
            subprocess.run([{cc!r}, "-shared", rel, "-o", out], check=True)
        else:
            shutil.copy(rel, out)
    """)
    return home


def read_calls(home) -> list[dict]:
    import json
    path = os.path.join(str(home), "calls.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]
