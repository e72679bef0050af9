"""Cache faults with clear outcomes: a read-only root names itself and the variable to set (a read-only
root after a writable one still serves lookups); stale build dirs of dead processes are reaped; a
killed process takes its compiler down with it."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from deepjit import DiskCache
from deepjit.disk_cache import STALE_SECONDS
from deepjit.errors import DeepJITError
from tests.testkit.private_mount import mount_unavailable, private_tmpfs_argv

from .helpers import ADD_SOURCE, list_tmp, make_runtime, wrap_cxx

DIGEST = "0123456789abcdef0123456789abcdef"


@pytest.mark.skipif(mount_unavailable() is not None, reason=str(mount_unavailable()))
def test_read_only_root(tmp_path):
    # /mnt in a private namespace: fill it, remount it read-only, then use it alone and behind a writable root.
    build = textwrap.dedent(f"""
        import deepjit
        deepjit.Runtime(deepjit.Config({str(tmp_path)!r}, "TST"), "host").compile_without_load("add_i64", {ADD_SOURCE!r})
    """)
    check = textwrap.dedent(f"""
        import ctypes, os, deepjit
        from deepjit.errors import DeepJITError
        config = deepjit.Config({str(tmp_path)!r}, "TST")
        os.environ["TST_JIT_CACHE_DIR"] = {str(tmp_path / "rw")!r} + ":/mnt/ro"
        kernel = deepjit.Runtime(config, "host").compile("add_i64", {ADD_SOURCE!r})
        out = ctypes.c_int64(0)
        kernel(ctypes.addressof(out), 40, 2)
        print("hit", kernel.path, out.value, os.path.exists({str(tmp_path / "rw" / "cache")!r}))
        os.environ["TST_JIT_CACHE_DIR"] = "/mnt/ro"
        try:
            deepjit.Runtime(config, "host").compile("other", {ADD_SOURCE.replace("add_i64", "other")!r})
        except DeepJITError as exc:
            print("error", exc)
    """)
    script = (f'TST_JIT_CACHE_DIR=/mnt/ro {sys.executable} -c "$0" && mount -o remount,ro /mnt && '
              f'{sys.executable} -c "$1"')
    proc = subprocess.run(private_tmpfs_argv("/mnt", "16m", ["sh", "-c", script, build, check]),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    hit, error = proc.stdout.strip().split("\n")
    assert hit.startswith("hit /mnt/ro/cache/add_i64.") and hit.endswith(" 42 False")  # nothing written to rw
    assert "JIT cache root /mnt/ro is not writable (Read-only file system)" in error
    assert "TST_JIT_CACHE_DIR (or DJ_JIT_CACHE_DIR)" in error


def test_stale_build_dirs_are_reaped_on_the_first_miss(tmp_path):
    tmp = tmp_path / "tmp"
    names = {"dead_old": "999999999-00000000-00000000-00000001", "dead_new": "999999999-00000000-00000000-00000002",
             "alive_old": f"{os.getpid()}-00000000-00000000-00000003", "aside_old": "1-00000000-00000000-00000004.corrupt"}
    old = time.time() - 2 * STALE_SECONDS
    for key, name in names.items():
        (tmp / name / "sub").mkdir(parents=True)
        (tmp / name / "sub" / "kernel.o").write_bytes(b"x")
        if key.endswith("_old"):
            os.utime(tmp / name, (old, old))
    entry = DiskCache([str(tmp_path)]).entry("kern", DIGEST)
    left = list_tmp(tmp_path)
    assert sorted(set(left) - {os.path.basename(entry.tmp_path)}) == sorted([names["dead_new"], names["alive_old"]])
    entry.abandon()


def test_a_killed_process_takes_its_compiler_down(tmp_path):
    pid_file = tmp_path / "compiler.pid"
    cxx = wrap_cxx(tmp_path / "cxx", f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)")
    child = textwrap.dedent(f"""
        import deepjit
        deepjit.Runtime(deepjit.Config({str(tmp_path)!r}, "TST"), "host").compile("add_i64", {ADD_SOURCE!r})
    """)
    env = dict(os.environ, TST_JIT_CACHE_DIR=str(tmp_path / "cache"), TST_JIT_CXX=cxx)
    proc = subprocess.Popen([sys.executable, "-c", child], env=env)
    try:
        deadline = time.time() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert proc.poll() is None and time.time() < deadline, "the compiler never started"
            time.sleep(0.05)
        compiler = int(pid_file.read_text())
        assert os.getpgid(compiler) != os.getpgid(0)  # its own process group
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.time() + 10
    while _alive(compiler):
        assert time.time() < deadline, "the compiler outlived the process that started it"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its (re)parent counts as gone
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_unwritable_root_error_without_a_mount(tmp_path, monkeypatch):
    # The same message where no tmpfs can be mounted: the first mkdir of the build dir fails.
    rt = make_runtime(tmp_path, monkeypatch)

    def refuse(path, mode=0o777):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "mkdir", refuse)
    with pytest.raises(DeepJITError, match=f"JIT cache root {tmp_path / 'cache'} is not writable .*TST_JIT_CACHE_DIR"):
        rt.compile_without_load("add_i64", ADD_SOURCE)


@pytest.mark.parametrize("where", ["root", "ancestor"])
def test_a_root_that_is_a_file_names_the_variable(tmp_path, monkeypatch, where):
    a_file = tmp_path / "not_a_dir"
    a_file.write_text("x")
    root = a_file if where == "root" else a_file / "cache"
    runtime = make_runtime(tmp_path, monkeypatch, cache=root)
    with pytest.raises(DeepJITError, match=r"JIT cache root .*not_a_dir.* file.*TST_JIT_CACHE_DIR"):
        runtime.compile("add_i64", ADD_SOURCE)
    # a read-only second root that is a file: lookups skip it, builds go to the first
    ok = make_runtime(tmp_path, monkeypatch, cache=f"{tmp_path / 'rw'}:{a_file}")
    assert ok.compile("add_i64", ADD_SOURCE).path.startswith(str(tmp_path / "rw"))
