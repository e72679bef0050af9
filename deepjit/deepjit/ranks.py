"""Local ranks as real processes: ``run(fn, world_size, *args)`` spawns ``world_size`` processes on this host;
each joins a gloo group over 127.0.0.1 and calls ``fn(rank, world_size, *args)`` (``fn`` a module-level
function, its return value picklable). The values come back in rank order. A rank that raises, dies without
reporting, or does not finish within ``timeout_s`` seconds fails the call with ``RankFailure`` carrying every
failed rank's traceback; all ranks are then killed, so nothing hangs. Used by the libraries' multi-rank twin
estimates (``make ascend-check``) and by the test suite.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any


class RankFailure(RuntimeError):
    pass


GRACE_S = 10   # how long the other ranks get once one has failed (they may wait on it forever)


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
    torch.set_num_threads(1)   # ranks share the host's cores
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


def run(fn: Callable, world_size: int, *args, timeout_s: float = 120.0, env: dict | None = None) -> list[Any]:
    """Each rank's return value, in rank order (module docstring); ``env`` is set in every rank first."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(fn, r, world_size, port, results, dict(env or {}), args), daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    outcome: dict[int, tuple[str, Any]] = {}
    cut_short = False
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
                if dead:  # died without reporting (segfault, os._exit, kill): collect what the others sent
                    time.sleep(0.5)
                    while True:
                        try:
                            rank, status, value = results.get_nowait()
                            outcome[rank] = (status, value)
                        except queue.Empty:
                            break
                    for r in dead:
                        outcome.setdefault(r, ("error", f"process exited with code {procs[r].exitcode}"))
            if not cut_short and any(s == "error" for s, _ in outcome.values()):
                cut_short, deadline = True, min(deadline, time.monotonic() + GRACE_S)
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
        within = f"{GRACE_S} s of a failed rank" if cut_short else f"{timeout_s:.0f} s"
        errors.append(f"ranks {hung} did not finish within {within} (killed)")
    if errors:
        raise RankFailure("\n".join(errors))
    return [outcome[r][1] for r in range(world_size)]
