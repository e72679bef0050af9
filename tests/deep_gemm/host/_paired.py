"""Alternating best-of timing for benchmarks on a shared machine: the op and its baseline run in
turn and each keeps its best wall time, so a load spike slows both or neither."""
import time


def paired(fn, baseline, reps: int) -> tuple[float, float]:
    """Best wall times of ``fn`` and ``baseline`` over ``reps`` alternating runs after one warm-up each."""
    fn(), baseline()
    best, best_base = float("inf"), float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        t = time.perf_counter()
        baseline()
        best_base = min(best_base, time.perf_counter() - t)
    return best, best_base
