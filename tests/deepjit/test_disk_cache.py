"""The disk cache: publication by rename, hits across processes and roots, cleanup and debris."""
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from deepjit import DiskCache, disk_cache
from deepjit.disk_cache import COMMITTED
from deepjit.errors import CompileError, DeepJITError

from .helpers import ADD_SOURCE, list_entries, list_tmp, make_runtime, wrap_cxx

DIGEST = "0123456789abcdef0123456789abcdef"


def build(cache: DiskCache, files: dict, tag="kern"):
    entry = cache.entry(tag, DIGEST)
    assert not entry.is_hit
    for name, text in files.items():
        with open(os.path.join(entry.tmp_path, name), "w") as f:
            f.write(text)
    return entry


def test_commit_then_hit(tmp_path):
    cache = DiskCache([str(tmp_path)])
    entry = build(cache, {"kernel.bin": "v1"})
    final = entry.commit()
    assert final == str(tmp_path / "cache" / f"kern.{DIGEST}")
    assert sorted(os.listdir(final)) == [COMMITTED, "kernel.bin"]
    assert list_tmp(tmp_path) == []
    hit = cache.entry("kern", DIGEST)
    assert hit.is_hit and hit.final_path == final and hit.commit() == final


@pytest.mark.parametrize("tag", ["", "a-b", "a.b", "a/b", "ä", "a b"])
def test_invalid_tags(tmp_path, tag):
    with pytest.raises(DeepJITError, match="cache tag must contain only letters, digits, or underscores"):
        DiskCache([str(tmp_path)]).entry(tag, DIGEST)


def test_abandoned_entry_removes_its_build_dir(tmp_path):
    cache = DiskCache([str(tmp_path)])
    entry = build(cache, {"partial": "x"})
    del entry
    assert list_tmp(tmp_path) == [] and list_entries(tmp_path) == []


def test_losing_writer_adopts_the_winner(tmp_path, monkeypatch):
    # two builds of one entry at once: what happens when a waiter gave up on the build lock
    monkeypatch.setattr(disk_cache, "BUILD_WAIT_SECONDS", 0)
    cache = DiskCache([str(tmp_path)])
    a = build(cache, {"owner_a": "a", "owner_b": "a"})
    b = build(cache, {"owner_a": "b", "owner_b": "b"})
    winner = a.commit()
    assert b.commit() == winner
    assert sorted(os.listdir(winner)) == [COMMITTED, "owner_a", "owner_b"]
    assert {open(os.path.join(winner, n)).read() for n in ("owner_a", "owner_b")} == {"a"}
    assert list_tmp(tmp_path) == []


def test_broken_entry_without_marker_is_ignored_and_replaced(tmp_path):
    broken = tmp_path / "cache" / f"kern.{DIGEST}"
    broken.mkdir(parents=True)
    (broken / "kernel.bin").write_text("half-written")
    cache = DiskCache([str(tmp_path)])
    assert cache.lookup("kern", DIGEST) is None
    final = build(cache, {"kernel.bin": "good"}).commit()
    assert open(os.path.join(final, "kernel.bin")).read() == "good"
    assert os.path.exists(os.path.join(final, COMMITTED)) and list_tmp(tmp_path) == []


def test_secondary_root_hits_without_writing_anywhere(tmp_path, monkeypatch):
    writer = DiskCache([str(tmp_path / "secondary")])
    final = build(writer, {"kernel.bin": "x"}).commit()
    os.chmod(final, 0o555)
    os.chmod(tmp_path / "secondary", 0o555)
    # Running as root ignores mode bits, so also make the marker bump fail as on a read-only mount.
    real_utime = os.utime

    def read_only_utime(path, *args, **kwargs):
        if str(path).startswith(str(tmp_path / "secondary")):
            raise PermissionError(30, "Read-only file system", path)
        return real_utime(path, *args, **kwargs)

    monkeypatch.setattr(os, "utime", read_only_utime)
    try:
        reader = DiskCache([str(tmp_path / "primary"), str(tmp_path / "secondary")])
        hit = reader.entry("kern", DIGEST)
        assert hit.is_hit and hit.final_path == final
        assert not (tmp_path / "primary").exists()
        # an incomplete primary entry does not hide the valid secondary one
        (tmp_path / "primary" / "cache" / f"kern.{DIGEST}").mkdir(parents=True)
        assert reader.lookup("kern", DIGEST) == final
    finally:
        os.chmod(tmp_path / "secondary", 0o755)
        os.chmod(final, 0o755)


def test_failed_compile_publishes_nothing(tmp_path, monkeypatch):
    rt = make_runtime(tmp_path, monkeypatch)
    with pytest.raises(CompileError, match="command failed with exit code"):
        rt.compile("broken", "#error deliberately broken\n")
    assert list_entries(tmp_path / "cache") == [] and list_tmp(tmp_path / "cache") == []
    # the runtime still works afterwards
    assert rt.compile("add_i64", ADD_SOURCE) is not None


def test_meta_json_describes_the_build(tmp_path, monkeypatch):
    rt = make_runtime(tmp_path, monkeypatch, extra_signature="lib-1.0")
    path = rt.compile_without_load("add_i64", ADD_SOURCE)
    assert sorted(os.listdir(path)) == [COMMITTED, "kernel.cpp", "kernel.so", "meta.json"]
    with open(os.path.join(path, "meta.json")) as f:
        raw = f.read()
    meta = json.loads(raw)
    assert list(meta) == ["command", "config", "compiler_info", "compiler_options", "artifact_sha256"]
    assert ": " not in raw and ", " not in raw.split('"command"')[0]  # compact
    assert meta["command"].startswith(rt.backend.cxx + " -O3 -march=native -fopenmp")
    # the source, then the matrix engine's libraries (brgemm links torch's), then the output
    link = " ".join(rt.default_compiler_options.get_link_flags())
    tail = "kernel.cpp " + (link + " " if link else "") + "-o "
    assert tail in meta["command"] and meta["command"].endswith("/kernel.so")
    assert meta["command"].split(tail)[0].endswith("/")  # kernel.cpp in the build dir
    assert meta["config"]["extra_signature"] == "lib-1.0"
    assert meta["compiler_options"]["optimize_level"] == "3"
    assert "-fPIC" in meta["compiler_options"]["cxx_flags"]
    # a hit never rewrites metadata
    mtime = os.path.getmtime(os.path.join(path, "meta.json"))
    again = make_runtime(tmp_path, monkeypatch, extra_signature="lib-1.0")
    assert again.compile_without_load("add_i64", ADD_SOURCE) == path
    assert os.path.getmtime(os.path.join(path, "meta.json")) == mtime


def test_hit_in_a_new_process_does_not_run_the_compiler(tmp_path, monkeypatch):
    rt = make_runtime(tmp_path, monkeypatch)
    path = rt.compile_without_load("add_i64", ADD_SOURCE)
    marker = tmp_path / "compiler-ran"
    cxx = wrap_cxx(tmp_path / "cxx", f"open({str(marker)!r}, 'w').close()\nsys.exit(3)")
    child = textwrap.dedent(f"""
        import ctypes, deepjit
        rt = deepjit.Runtime(deepjit.Config({str(tmp_path)!r}, "TST"), "host")
        kernel = rt.compile("add_i64", {ADD_SOURCE!r})
        out = ctypes.c_int64(0)
        kernel(ctypes.addressof(out), 40, 2)
        print(kernel.path, out.value)
    """)
    env = dict(os.environ, TST_JIT_CACHE_DIR=str(tmp_path / "cache"), TST_JIT_CXX=cxx)
    proc = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [path, "42"]
    assert not marker.exists()


def test_a_second_miss_waits_for_the_build_and_hits(tmp_path):
    cache = DiskCache([str(tmp_path)])
    first = build(cache, {"payload": "x"})
    got = []
    waiter = threading.Thread(target=lambda: got.append(DiskCache([str(tmp_path)]).entry("kern", DIGEST)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()  # held at the build lock, not building a second copy
    published = first.commit()
    waiter.join(10)
    assert got and got[0].is_hit and got[0].final_path == published
    assert list_tmp(tmp_path) == []


def test_a_waiter_gives_up_after_the_wait_and_builds(tmp_path, monkeypatch):
    monkeypatch.setattr(disk_cache, "BUILD_WAIT_SECONDS", 0.2)
    cache = DiskCache([str(tmp_path)])
    first = build(cache, {"payload": "x"})
    start = time.monotonic()
    second = build(cache, {"payload": "y"})  # the first never finishes in time
    assert time.monotonic() - start >= 0.2 and second.tmp_path != first.tmp_path
    assert second.commit() == first.commit()


def test_an_abandoned_build_releases_its_lock(tmp_path):
    cache = DiskCache([str(tmp_path)])
    build(cache, {"payload": "x"}).abandon()
    start = time.monotonic()
    build(cache, {"payload": "y"}).commit()
    assert time.monotonic() - start < 5


def test_a_failing_lookup_after_the_lock_releases_it(tmp_path, monkeypatch):
    cache = DiskCache([str(tmp_path)])
    calls = []
    lookup = cache.lookup

    def failing(tag, digest):
        calls.append(tag)
        if len(calls) == 2:  # the re-lookup under the lock
            raise OSError("disk trouble")
        return lookup(tag, digest)

    monkeypatch.setattr(cache, "lookup", failing)
    with pytest.raises(OSError, match="disk trouble"):
        cache.entry("kern", DIGEST)
    monkeypatch.setattr(disk_cache, "BUILD_WAIT_SECONDS", 30)
    start = time.monotonic()
    build(cache, {"payload": "x"}).commit()
    assert time.monotonic() - start < 5  # the lock was not left held


def test_a_forked_child_does_not_keep_the_lock(tmp_path):
    import os
    cache = DiskCache([str(tmp_path)])
    entry = build(cache, {"payload": "x"})
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child holds the inherited descriptor until the parent is done
        os.read(r, 1)
        os._exit(0)
    try:
        entry.abandon()
        start = time.monotonic()
        build(cache, {"payload": "y"}).commit()
        assert time.monotonic() - start < 5
    finally:
        os.write(w, b"x")
        os.waitpid(pid, 0)


@pytest.mark.parametrize("fate", ["stopped", "record of a dead pid"])
def test_a_waiter_takes_over_from_a_stuck_holder_promptly(tmp_path, monkeypatch, fate):
    import signal
    # A wait that cannot run out within the test: only the stuck-holder check can end it.
    monkeypatch.setattr(disk_cache, "BUILD_WAIT_SECONDS", 3600)
    verdicts = _spy_on_holder_checks(monkeypatch)
    holder_code = textwrap.dedent(f"""
        import sys, time
        from deepjit import DiskCache
        entry = DiskCache([{str(tmp_path)!r}]).entry("kern", {DIGEST!r})
        print("holding", flush=True)
        time.sleep(60)
    """)
    holder = subprocess.Popen([sys.executable, "-c", holder_code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        lock_file = tmp_path / "locks" / f"kern.{DIGEST}"
        assert lock_file.read_text().split()[0] == str(holder.pid)
        if fate == "stopped":
            os.kill(holder.pid, signal.SIGSTOP)
        else:  # the lock still held (as by a child that inherited it) but the recorded holder gone
            dead = subprocess.Popen([sys.executable, "-c", "pass"])
            dead.wait()
            lock_file.write_text(f"{dead.pid} {lock_file.read_text().split()[1]}\n")
        entry = build(DiskCache([str(tmp_path)]), {"payload": "y"})
        assert True in verdicts  # the holder was seen stuck (the hour-long wait did not run out)
        assert entry.commit().endswith(f"kern.{DIGEST}")
    finally:
        holder.kill()  # SIGKILL ends a stopped process too
        holder.wait()


def _spy_on_holder_checks(monkeypatch) -> list:
    """Records each verdict of the waiter's stuck-holder check."""
    verdicts = []
    check = disk_cache._holder_stuck

    def spy(record):
        verdicts.append(check(record))
        return verdicts[-1]

    monkeypatch.setattr(disk_cache, "_holder_stuck", spy)
    return verdicts


def test_a_waiter_keeps_waiting_for_a_running_holder(tmp_path, monkeypatch):
    monkeypatch.setattr(disk_cache, "BUILD_WAIT_SECONDS", 0.5)
    verdicts = _spy_on_holder_checks(monkeypatch)
    first = build(DiskCache([str(tmp_path)]), {"payload": "x"})  # held by this (running) process
    second = build(DiskCache([str(tmp_path)]), {"payload": "y"})
    # it built only after its own wait ran out: every look at the holder found it running
    assert verdicts and not any(verdicts)
    first.abandon()
    second.abandon()
