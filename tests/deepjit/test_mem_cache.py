"""The in-process single-flight cache, and the runtime's use of it."""
import threading
import time

import pytest

from deepjit import MemCache

from .helpers import ADD_SOURCE, make_runtime, wrap_cxx


def test_concurrent_requests_run_the_factory_once():
    cache, calls, start = MemCache(), [], threading.Barrier(8)

    def factory():
        calls.append(1)
        time.sleep(0.2)  # keep the flight open while the others arrive
        return object()

    results = []

    def worker():
        start.wait()
        results.append(cache.get_or_create("k", factory))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(results) == 8 and all(r is results[0] for r in results)


def test_failure_reaches_every_waiter_and_is_not_cached():
    cache, entered = MemCache(), threading.Event()

    def failing():
        entered.set()
        time.sleep(0.2)
        raise ValueError("compile failed")

    errors = []

    def waiter():
        entered.wait()
        try:
            cache.get_or_create("k", lambda: "never used by a waiter")
        except ValueError as exc:
            errors.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    with pytest.raises(ValueError):
        cache.get_or_create("k", failing)
    t.join()
    assert len(errors) == 1 and len(cache) == 0
    assert cache.get_or_create("k", lambda: "retried") == "retried"


def test_different_keys_do_not_wait_on_each_other():
    cache, release = MemCache(), threading.Event()
    slow = threading.Thread(target=lambda: cache.get_or_create("slow", lambda: release.wait(5) and "slow"))
    slow.start()
    t0 = time.perf_counter()
    assert cache.get_or_create("fast", lambda: "fast") == "fast"
    assert time.perf_counter() - t0 < 1.0
    release.set()
    slow.join()


def test_two_threads_compiling_one_kernel_run_the_compiler_once(tmp_path, monkeypatch):
    log = tmp_path / "compiles.log"
    monkeypatch.setenv("TST_JIT_CXX", wrap_cxx(tmp_path / "cxx", f"""
        open({str(log)!r}, "a").write("x")
        time.sleep(0.5)
    """))
    rt = make_runtime(tmp_path, monkeypatch)
    kernels = []
    threads = [threading.Thread(target=lambda: kernels.append(rt.compile("add_i64", ADD_SOURCE))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert log.read_text() == "x"
    assert len(kernels) == 2 and kernels[0] is kernels[1]


def test_runtimes_share_disk_entries_not_kernel_objects(tmp_path, monkeypatch):
    import torch
    a = make_runtime(tmp_path, monkeypatch, prefix="TSTA", cache=tmp_path / "shared")
    b = make_runtime(tmp_path, monkeypatch, prefix="TSTB", cache=tmp_path / "shared")
    ka, kb = a.compile("add_i64", ADD_SOURCE), b.compile("add_i64", ADD_SOURCE)
    assert ka is not kb and ka.path == kb.path
    out = torch.zeros(1, dtype=torch.int64)
    kb(out, 40, 2)
    assert out.item() == 42
