"""Multi-process launcher: N local ranks over gloo on 127.0.0.1, failures and hangs surfaced.

``run_ranks(fn, world_size, *args)`` spawns ``world_size`` processes; each joins a gloo group and
calls ``fn(rank, world_size, *args)`` (``fn`` must be a module-level function). The first failing
rank's traceback, and every other rank's, are raised in the test; a rank that does not finish
within ``timeout`` seconds fails the test instead of hanging CI, and all ranks are killed.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(fn, rank, world_size, port, results, env, args):
    os.environ.update(env)
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world_size)})
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if os.environ.get("DJ_TEST_DEFAULT_DTYPE"):  # e.g. bfloat16, as upstream DeepEP's init_dist sets it
        torch.set_default_dtype(getattr(torch, os.environ["DJ_TEST_DEFAULT_DTYPE"]))
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
        value = fn(rank, world_size, *args)
        results.put((rank, "ok", value))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass


class RankFailure(AssertionError):
    pass


def run_ranks(fn: Callable, world_size: int, *args, timeout: float = 120.0,
              env: dict | None = None) -> list[Any]:
    """Returns each rank's return value (picklable), in rank order."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(fn, r, world_size, port, results, dict(env or {}), args), daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    outcome: dict[int, tuple[str, Any]] = {}
    try:
        while len(outcome) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                rank, status, value = results.get(timeout=min(remaining, 0.5))
                outcome[rank] = (status, value)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in outcome]
                if dead:  # died without reporting (segfault, os._exit, kill): give peers a moment, then stop
                    time.sleep(0.5)
                    while True:
                        try:
                            rank, status, value = results.get_nowait()
                            outcome[rank] = (status, value)
                        except queue.Empty:
                            break
                    for r in dead:
                        outcome.setdefault(r, ("error", f"process exited with code {procs[r].exitcode}"))
                    if any(s == "error" for s, _ in outcome.values()) and len(outcome) < world_size:
                        deadline = min(deadline, time.monotonic() + 10)
    finally:
        for p in procs:
            p.join(timeout=max(0.0, min(5.0, deadline - time.monotonic())))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    errors = [f"--- rank {r} ---\n{v}" for r, (s, v) in sorted(outcome.items()) if s == "error"]
    hung = [r for r in range(world_size) if r not in outcome]
    if hung:
        errors.append(f"ranks {hung} did not finish within {timeout:.0f} s (killed)")
    if errors:
        raise RankFailure("\n".join(errors))
    return [outcome[r][1] for r in range(world_size)]


def in_sequence(rank: int, world_size: int, *steps: tuple) -> list[Any]:
    """A ``run_ranks`` target running several scenarios, ``(fn, *args)`` each, one after another in
    the same ranks: one spawn and one import of the libraries for all of them. Each step starts from
    the environment the ranks started with (a step's ``os.environ`` changes are undone after it)."""
    values = []
    for fn, *args in steps:
        saved = dict(os.environ)
        try:
            values.append(fn(rank, world_size, *args))
        except BaseException as exc:
            raise AssertionError(f"step {fn.__name__}{tuple(args)} failed") from exc
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return values


def with_env(rank: int, world_size: int, env: dict, fn: Callable, *args) -> Any:
    """An ``in_sequence`` step under extra environment variables (``in_sequence`` undoes them after)."""
    os.environ.update(env)
    return fn(rank, world_size, *args)


@contextlib.contextmanager
def one_rank_group():
    """A one-rank gloo group over a HashStore in this process (single-rank checks need no spawn); the
    process must not have a group already."""
    import torch.distributed as dist
    assert not dist.is_initialized(), "a one-rank group needs a process without a default group"
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def environ(**values):
    """``os.environ`` with ``values`` (None: unset) inside: a buffer picks its engines at construction."""
    saved = dict(os.environ)
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
