"""tile_kernels called from several threads at once gives what one thread gives: the shared output
pool hands each buffer to one caller, and kernel memo caches and lazy runtimes are built once."""
import sys
import threading

import pytest
import torch

import tile_kernels
from deepjit import host_memory
from tile_kernels._lib import LIB, OUTPUTS

pytestmark = pytest.mark.usefixtures("host")

THREADS, CALLS = 4, 2000


def test_four_threads_match_one_thread(monkeypatch):
    # Small transposes, pooled by lowering the pool's threshold, keep 8,000 calls within seconds;
    # the threads cycle through the inputs. One kernel thread each: four callers on OpenMP teams
    # would oversubscribe the cores.
    monkeypatch.setattr(host_memory, "MIN_POOLED_BYTES", 4096)
    monkeypatch.setattr(LIB, "_num_threads", 1)
    xs = [torch.randn(64, 128, dtype=torch.bfloat16) for _ in range(THREADS)]
    transpose = tile_kernels.transpose.transpose
    expected = [transpose(x).clone() for x in xs]
    assert expected[0].numel() * expected[0].element_size() >= host_memory.MIN_POOLED_BYTES
    OUTPUTS.clear()
    wrong = []
    start = threading.Barrier(THREADS)

    def worker(tid):
        start.wait()
        for i in range(CALLS):
            j = (tid + i) % THREADS
            out = transpose(xs[j])
            if not torch.equal(out, expected[j]):
                wrong.append((tid, i))
            del out

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert wrong == [], f"{len(wrong)} of {THREADS * CALLS} calls returned another call's output"
