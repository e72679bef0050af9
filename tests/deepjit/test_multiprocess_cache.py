"""Publication across processes: one build and one entry from concurrent writers, nothing from killed ones."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from deepjit.errors import CompileError

from .helpers import ADD_SOURCE, list_entries, list_tmp, make_runtime, wrap_cxx

CHILD = textwrap.dedent("""
    import ctypes, sys, deepjit
    rt = deepjit.Runtime(deepjit.Config(sys.argv[1], "TST"), "host")
    kernel = rt.compile("add_i64", sys.argv[2])
    out = ctypes.c_int64(0)
    kernel(ctypes.addressof(out), 40, 2)
    print(kernel.path, out.value)
""")


def spawn(tmp_path, cxx, source=ADD_SOURCE, child=CHILD):
    env = dict(os.environ, TST_JIT_CACHE_DIR=str(tmp_path / "cache"), TST_JIT_CXX=cxx)
    return subprocess.Popen([sys.executable, "-c", child, str(tmp_path), source], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_processes_publish_one_entry(tmp_path):
    n = 4
    starts, ready, go = tmp_path / "starts", tmp_path / "ready", tmp_path / "go"
    starts.mkdir()
    ready.mkdir()
    # The compiler records itself, then holds its build until the test says go.
    cxx = wrap_cxx(tmp_path / "cxx", f"""
        open(os.path.join({str(starts)!r}, str(os.getpid())), "w").close()
        deadline = time.time() + 60
        while not os.path.exists({str(go)!r}):
            if time.time() > deadline:
                sys.exit("go timeout")
            time.sleep(0.01)
    """)
    # each child says when it is about to compile
    child = CHILD.replace('kernel = rt.compile(', f'import os; open(os.path.join({str(ready)!r}, str(os.getpid())), "w")'
                                                   '.close()\nkernel = rt.compile(')
    assert child != CHILD
    procs = [spawn(tmp_path, cxx, child=child) for _ in range(n)]
    deadline = time.time() + 60
    while len(os.listdir(ready)) < n or not os.listdir(starts):
        assert time.time() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.02)
    time.sleep(0.5)  # the others have missed by now: without the lock each would be compiling too
    assert len(os.listdir(starts)) == 1 and all(p.poll() is None for p in procs)  # they wait at the build lock
    go.touch()
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    results = {tuple(out.split()) for out, _ in outputs}
    assert len(os.listdir(starts)) == 1  # one compile; the waiters hit the published entry
    assert len(results) == 1 and next(iter(results))[1] == "42"
    path = next(iter(results))[0]
    assert list_entries(tmp_path / "cache") == [os.path.basename(path)]
    assert sorted(os.listdir(path)) == [".committed", "kernel.cpp", "kernel.so", "meta.json"]
    assert list_tmp(tmp_path / "cache") == []


def test_concurrent_processes_without_the_lock_still_publish_one_entry(tmp_path):
    """Builds that overlap (a waiter gave up on the lock): every compiler runs, one entry is published."""
    n = 3
    starts = tmp_path / "starts"
    starts.mkdir()
    cxx = wrap_cxx(tmp_path / "cxx", f"""
        open(os.path.join({str(starts)!r}, str(os.getpid())), "w").close()
        deadline = time.time() + 60
        while len(os.listdir({str(starts)!r})) < {n}:
            if time.time() > deadline:
                sys.exit("barrier timeout")
            time.sleep(0.01)
    """)
    no_wait = CHILD.replace("import ctypes, sys, deepjit", "import ctypes, sys, deepjit, deepjit.disk_cache as dc; "
                            "dc.BUILD_WAIT_SECONDS = 0")
    assert no_wait != CHILD
    procs = [spawn(tmp_path, cxx, child=no_wait) for _ in range(n)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    assert len(os.listdir(starts)) == n
    results = {tuple(out.split()) for out, _ in outputs}
    assert len(results) == 1 and list_entries(tmp_path / "cache") == [os.path.basename(next(iter(results))[0])]
    assert list_tmp(tmp_path / "cache") == []


def test_compiler_killed_mid_build_publishes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TST_JIT_CXX", wrap_cxx(tmp_path / "cxx", "os.kill(os.getpid(), 9)"))
    rt = make_runtime(tmp_path, monkeypatch)
    with pytest.raises(CompileError, match="command failed with exit code 137"):
        rt.compile("add_i64", ADD_SOURCE)
    assert list_entries(tmp_path / "cache") == [] and list_tmp(tmp_path / "cache") == []


def test_killed_writer_leaves_only_a_stale_build_dir(tmp_path, monkeypatch):
    started = tmp_path / "started"
    cxx = wrap_cxx(tmp_path / "cxx", f"""
        open({str(started)!r}, "w").write(str(os.getpid()))
        time.sleep(120)
    """)
    proc = spawn(tmp_path, cxx)
    deadline = time.time() + 60
    while not (started.exists() and started.read_text()):
        assert time.time() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() is not None else ""
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    os.kill(int(started.read_text()), signal.SIGKILL)
    proc.communicate(timeout=30)
    assert list_entries(tmp_path / "cache") == []
    stale = list_tmp(tmp_path / "cache")
    assert len(stale) == 1 and stale[0].startswith(f"{proc.pid}-")
    # a later writer publishes normally and leaves the other writer's build dir alone
    rt = make_runtime(tmp_path, monkeypatch)
    assert rt.compile("add_i64", ADD_SOURCE) is not None
    assert len(list_entries(tmp_path / "cache")) == 1
    assert list_tmp(tmp_path / "cache") == stale
