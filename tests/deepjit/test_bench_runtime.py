"""Runtime overheads: cold host compile, warm hit in a new process, cached compile call, launch.

Targets (reported, never asserted): warm hit in a new process <= 20 ms, in-process cached compile
call <= 20 us, empty host kernel launch <= 10 us."""
import itertools
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from .helpers import ADD_SOURCE, make_runtime

pytestmark = pytest.mark.bench
NOOP = r"""
#include <deepjit/host/kernel.hpp>
DJ_KERNEL(noop, "ptr,i64") void noop(void*, int64_t) {}
"""


def per_call(fn, n: int) -> float:
    """Median over 5 rounds of the mean time of ``n`` back-to-back calls."""
    rounds = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t) / n)
    return sorted(rounds)[2]


def test_cold_host_compile(bench, tmp_path, monkeypatch):
    rt = make_runtime(tmp_path, monkeypatch)
    counter = itertools.count()
    # A new comment makes a new key, so every call is a miss: hash, compile, publish, load.
    seconds = bench.time(lambda: rt.compile("add_i64", ADD_SOURCE + f"// {next(counter)}\n"), warmup=1, reps=5)
    path = rt.compile_without_load("add_i64", ADD_SOURCE)
    with open(os.path.join(path, "meta.json")) as f:
        argv = json.load(f)["command"].split()
    # the recorded command names the build dir; rerun it on the published source
    argv = [os.path.join(path, "kernel.cpp") if a.endswith("kernel.cpp") else a for a in argv[:-1]]
    bare = bench.time(lambda: subprocess.run([*argv, str(tmp_path / "plain.so")], check=True), warmup=1, reps=5)
    bench.record("deepjit", "cold host compile (tiny kernel)", "1 kernel", seconds,
                 baseline="the same compiler command alone", baseline_seconds=bare)


def test_warm_hit_in_a_new_process(bench, tmp_path, monkeypatch):
    make_runtime(tmp_path, monkeypatch).compile_without_load("add_i64", ADD_SOURCE)
    child = textwrap.dedent(f"""
        import time
        t0 = time.perf_counter()
        import deepjit, deepjit.backends.host
        t1 = time.perf_counter()
        rt = deepjit.Runtime(deepjit.Config({str(tmp_path)!r}, "TST"), "host")
        kernel = rt.compile("add_i64", {ADD_SOURCE!r})
        t2 = time.perf_counter()
        print(t2 - t1, t2 - t0)
    """)
    env = dict(os.environ, TST_JIT_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(7):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", child], env=env, check=True, capture_output=True, text=True).stdout
        runs.append((*map(float, out.split()), time.perf_counter() - t))
    median = lambda i: sorted(r[i] for r in runs)[len(runs) // 2]
    bench.record("deepjit", "warm hit, new process: Runtime()+compile", "1 kernel", median(0))
    bench.record("deepjit", "warm hit, new process: + import deepjit", "1 kernel", median(1))
    bench.record("deepjit", "warm hit, new process: whole process", "python -c", median(2))


def test_cached_compile_call(bench, tmp_path, monkeypatch):
    rt = make_runtime(tmp_path, monkeypatch)
    rt.compile("add_i64", ADD_SOURCE)
    bench.record("deepjit", "in-process cached compile()", "1 kernel",
                 per_call(lambda: rt.compile("add_i64", ADD_SOURCE), 20000))


def test_empty_kernel_launch(bench, tmp_path, monkeypatch):
    rt = make_runtime(tmp_path, monkeypatch)
    kernel = rt.compile("noop", NOOP)
    x = torch.zeros(1)
    launch = per_call(lambda: kernel(x, 1), 20000)
    via_runtime = per_call(lambda: rt.launch(kernel, None, x, 1), 20000)
    torch_op = per_call(lambda: x.add_(0), 20000)
    bench.record("deepjit", "empty host kernel launch", "tensor + int", launch,
                 baseline="torch x.add_(0), 1 element", baseline_seconds=torch_op)
    bench.record("deepjit", "empty launch via runtime.launch", "tensor + int", via_runtime,
                 baseline="torch x.add_(0), 1 element", baseline_seconds=torch_op)
