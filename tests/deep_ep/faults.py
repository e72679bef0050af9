"""Helpers of the fault tests: expecting an error, a call made late, reporting what one call did
(seconds taken and the exception raised, or "no error") in one file per rank that the parent
reads after the ranks are gone, and the parent's check of those reports after a peer was killed."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path


def record_outcome(result_dir: str, rank: int, call: Callable[[], object]) -> None:
    start = time.monotonic()
    try:
        call()
        outcome = "no error"
    except Exception as exc:  # noqa: BLE001 - the type is what the test reports
        outcome = f"{type(exc).__name__}: {exc}"
    with open(os.path.join(result_dir, f"rank{rank}"), "w") as f:
        f.write(f"{time.monotonic() - start:.2f}|{outcome}")


def read_outcome(result_dir: Path, rank: int) -> tuple[float, str]:
    seconds, outcome = (result_dir / f"rank{rank}").read_text().split("|", 1)
    return float(seconds), outcome


def expect_error(call: Callable[[], object], exc_type: type[BaseException], *fragments: str) -> str:
    """``call`` must raise ``exc_type`` with every fragment in its message; returns the message."""
    try:
        call()
    except exc_type as exc:
        msg = str(exc)
        missing = [f for f in fragments if f not in msg]
        assert not missing, f"message {msg!r} lacks {missing}"
        return msg
    raise AssertionError(f"expected {exc_type.__name__}")


def late_first_call(fn: Callable, seconds: float) -> Callable:
    """``fn`` whose first call starts ``seconds`` late (a peer late past the handshake, inside a collective)."""
    late = [seconds]

    def call(*args):
        time.sleep(late.pop() if late else 0)
        return fn(*args)
    return call


def assert_live_ranks_failed(result_dir: Path, failure: BaseException, live, within_s: float,
                             errors: tuple[str, ...]) -> list[str]:
    """After a peer was killed (``failure``: run_ranks' RankFailure, which names the ranks that died): each
    live rank is alive, its call failed within ``within_s`` with one of ``errors``; returns their outcomes."""
    outcomes = []
    for rank in live:
        assert f"--- rank {rank} ---" not in str(failure), str(failure)
        seconds, outcome = read_outcome(result_dir, rank)
        assert seconds < within_s, outcome
        assert outcome.startswith(errors), outcome
        outcomes.append(outcome)
    return outcomes
