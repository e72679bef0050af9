"""Timing helpers of upstream's ``deep_ep.utils.testing``, on the host clock (CPU work is done
when a call returns; on an NPU the device is synchronised around each call)."""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import torch

__all__ = ["bench", "bench_kineto", "empty_suppress", "flush_l2_cache", "suppress_stdout_stderr"]

_FLUSH_BYTES = 256 << 20   # more than any last-level cache, as upstream's 256 MB


def _sync() -> None:
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        npu.synchronize()


def flush_l2_cache(enabled: bool = True) -> None:
    """Evicts the caches by zeroing a buffer larger than them."""
    if enabled:
        torch.zeros(_FLUSH_BYTES // 4, dtype=torch.int32)


def bench(fn: Callable, num_warmups: int = 50, num_tests: int = 50, post_fn: Callable | None = None,
          flush_l2: bool = True):
    """``(average, min, max)`` seconds of ``fn()`` over ``num_tests`` calls after ``num_warmups``,
    caches flushed before each, the first sample dropped (as upstream)."""
    _sync()
    for _ in range(num_warmups):
        fn()
    times = []
    for _ in range(num_tests):
        flush_l2_cache(flush_l2)
        _sync()
        start = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - start)
        if post_fn is not None:
            post_fn()
    times = times[1:] or times
    return sum(times) / len(times), min(times), max(times)


class empty_suppress:
    def __enter__(self):
        return self

    def __exit__(self, *_):
        pass


class suppress_stdout_stderr:
    """Silences this process's stdout and stderr, file descriptors included (native code too)."""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self._null = open(os.devnull, "w")
        self._streams = sys.stdout, sys.stderr
        self._fds = [(fd, os.dup(fd)) for fd in (sys.stdout.fileno(), sys.stderr.fileno())]
        for fd, _ in self._fds:
            os.dup2(self._null.fileno(), fd)
        sys.stdout = sys.stderr = self._null
        return self

    def __exit__(self, *_):
        self._null.flush()
        sys.stdout, sys.stderr = self._streams
        for fd, saved in self._fds:
            os.dup2(saved, fd)
            os.close(saved)
        self._null.close()


def bench_kineto(fn: Callable, kernel_names, num_tests: int = 30, suppress_kineto_output: bool = False,
                 trace_path: str | None = None, flush_l2: bool = True, barrier_comm_profiling: bool = False,
                 num_kernels_per_period: int = 1, barrier: Callable | None = None):
    """Upstream's signature. Upstream reads each named kernel's time from a profiler trace; host
    kernels leave no such trace, so every name gets the host-clock average time of ``fn()`` (a
    tuple of them when ``kernel_names`` is a tuple). ``barrier`` runs before each timed call.
    With ``num_kernels_per_period > 1`` (a name launched that many times per call, e.g. send and
    receive halves of a hooked operation) each name gets upstream's list of that many durations:
    the call's time split evenly, which the host clock cannot tell apart."""
    times = []
    for _ in range(num_tests):
        flush_l2_cache(flush_l2)
        if barrier is not None:
            barrier()
        _sync()
        start = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - start)
    periods = max(num_kernels_per_period, 1)
    average = sum(times) / len(times) / periods
    per_name = [average] * periods if periods > 1 else average
    return tuple(per_name for _ in kernel_names) if isinstance(kernel_names, tuple) else per_name
