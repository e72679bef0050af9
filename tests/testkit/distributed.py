"""Multi-process launcher: N local ranks over gloo on 127.0.0.1, failures and hangs surfaced.

``run_ranks(fn, world_size, *args)`` spawns ``world_size`` processes; each joins a gloo group and
calls ``fn(rank, world_size, *args)`` (``fn`` must be a module-level function). The first failing
rank's traceback, and every other rank's, are raised in the test; a rank that does not finish
within ``timeout`` seconds fails the test instead of hanging CI, and all ranks are killed.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from deepjit import ranks
from deepjit.ranks import free_port  # noqa: F401 - tests import it from here


class RankFailure(AssertionError):
    pass


def _test_rank(rank: int, world_size: int, fn: Callable, *args) -> Any:
    if os.environ.get("DJ_TEST_DEFAULT_DTYPE"):  # e.g. bfloat16, as upstream DeepEP's init_dist sets it
        import torch
        torch.set_default_dtype(getattr(torch, os.environ["DJ_TEST_DEFAULT_DTYPE"]))
    return fn(rank, world_size, *args)


def run_ranks(fn: Callable, world_size: int, *args, timeout: float = 120.0,
              env: dict | None = None) -> list[Any]:
    """Returns each rank's return value (picklable), in rank order (``deepjit.ranks.run``); a failure fails
    the test."""
    try:
        return ranks.run(_test_rank, world_size, fn, *args, timeout_s=timeout, env=env)
    except ranks.RankFailure as exc:
        raise RankFailure(str(exc)) from None


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
