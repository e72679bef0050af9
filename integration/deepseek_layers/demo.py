"""`make run`: a tour of the suite. Runs one representative op of each library on CPU, checks it
against the library's reference path and prints time and throughput. Libraries that have not
landed their CPU path yet are listed as such."""
from __future__ import annotations

import time
from typing import Callable, Optional

import torch


def _time(fn: Callable[[], object], reps: int = 5) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2]


def _calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    return 0.0 if den == 0 else float(1 - 2 * (x * y).sum() / den)


def tour_deepjit():
    import deepjit
    import os
    src = r"""
#include <deepjit/host/convert.hpp>
#include <deepjit/host/parallel.hpp>
DJ_KERNEL(tour_to_bf16, "ptr,ptr,i64,i64")
void tour_to_bf16(uint16_t* out, const float* x, int64_t n, int64_t threads) {
    dj::parallel_for(n / 4096, threads, [&](int64_t b) {
        for (int64_t i = b * 4096; i < (b + 1) * 4096; ++i) out[i] = dj::f32_to_bf16(x[i]);
    });
}
"""
    rt = deepjit.Runtime(deepjit.Config(os.path.dirname(os.path.abspath(__file__)), "DEMO"), "host")
    kernel = rt.compile("tour_to_bf16", src)
    x = torch.randn(1 << 24)
    out = torch.empty(x.numel(), dtype=torch.bfloat16)
    threads = torch.get_num_threads()
    t = _time(lambda: kernel(out, x, x.numel(), threads))
    exact = torch.equal(out.view(torch.int16), x.bfloat16().view(torch.int16))
    return "fp32 -> bf16 cast (JIT host kernel)", f"{x.numel()}", t, f"{x.numel() * 6 / t / 1e9:.1f} GB/s", \
        "bit-exact" if exact else "MISMATCH", exact


TOUR: list[tuple[str, Callable[[], Optional[tuple]]]] = [("deepjit", tour_deepjit)]


def main() -> int:
    rows, ok = [], True
    for lib, fn in TOUR:
        try:
            op, shape, seconds, throughput, check, passed = fn()
        except (ImportError, AttributeError, NotImplementedError) as exc:
            rows.append((lib, "not yet implemented on CPU", "-", "-", "-", type(exc).__name__))
            continue
        ok &= passed
        rows.append((lib, op, shape, f"{seconds * 1e3:.3f} ms", throughput, check))
    widths = [max(len(str(r[i])) for r in rows + [("library", "op", "shape", "time", "throughput", "check")])
              for i in range(6)]
    header = ("library", "op", "shape", "time", "throughput", "check")
    for r in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
