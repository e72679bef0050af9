"""Timing helpers with upstream's names; on CPU they measure wall time."""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable

import torch


def _sync() -> None:
    npu = getattr(torch, "npu", None)
    if npu is not None and hasattr(npu, "synchronize"):
        try:
            npu.synchronize()
        except Exception:
            pass


def bench(fn: Callable, num_warmups: int = 5, num_tests: int = 10, high_precision: bool = False) -> float:
    """Mean seconds per call of ``fn`` after warm-up."""
    for _ in range(num_warmups):
        fn()
    _sync()
    start = time.perf_counter()
    for _ in range(num_tests):
        fn()
    _sync()
    return (time.perf_counter() - start) / num_tests


def bench_kineto(fn: Callable, kernel_names, num_tests: int = 30, suppress_kineto_output: bool = False,
                 trace_path: str | None = None, flush_l2: bool = True, with_multiple_kernels: bool = False,
                 barrier: Callable | None = None):
    """Upstream profiles named CUDA kernels; here every name gets the wall time of the whole call.

    Returns a float for one name, a tuple for several (upstream's shape). ``DG_USE_NVIDIA_TOOLS=1``
    returns 1 like upstream, skipping the measurement."""
    names = (kernel_names,) if isinstance(kernel_names, str) else tuple(kernel_names)
    if int(os.environ.get("DG_USE_NVIDIA_TOOLS", "0")):
        return 1 if len(names) == 1 else tuple(1 for _ in names)
    if barrier is not None:
        barrier()
    t = bench(fn, num_warmups=1, num_tests=num_tests)
    return t if isinstance(kernel_names, str) else tuple(t for _ in names)


def get_arch_major() -> int:
    """0 on CPU (no CUDA architecture); the CUDA major where a CUDA device exists."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_capability()[0]
    return 0


def test_filter(condition: Callable[[], bool]):
    """Decorator: run the test function only when ``condition()`` holds, else print a skip note."""
    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if condition():
                return fn(*args, **kwargs)
            print(f"{fn.__name__}: skipped (filter not met)")
        return wrapper
    return decorator


def ignore_env(name: str, condition: Callable[[], bool]):
    """Decorator: while the test runs with ``condition()`` true, environment variable ``name`` is unset."""
    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not condition() or name not in os.environ:
                return fn(*args, **kwargs)
            saved = os.environ.pop(name)
            try:
                return fn(*args, **kwargs)
            finally:
                os.environ[name] = saved
        return wrapper
    return decorator


@contextlib.contextmanager
def suppress_stdout_stderr():
    """Silence Python-level stdout and stderr inside the block."""
    with open(os.devnull, "w") as devnull:
        old_out, old_err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = devnull, devnull
        try:
            yield
        finally:
            sys.stdout, sys.stderr = old_out, old_err
