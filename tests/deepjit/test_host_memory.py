"""Huge-page hint for large host outputs: same tensors as torch.empty, advice applied where large."""
import sys
import threading
import time

import torch

from deepjit import host_memory


def test_empty_host_matches_torch_empty():
    for shape, dtype in (((3, 5), torch.float32), ((4096, 4096), torch.bfloat16), ((0,), torch.uint8)):
        t = host_memory.empty_host(*shape, dtype=dtype)
        assert t.shape == shape and t.dtype == dtype and t.is_contiguous()
        t.fill_(1)
        assert bool((t == 1).all())


def test_advice_reaches_the_kernel_for_large_tensors(monkeypatch):
    calls = []
    monkeypatch.setattr(host_memory, "_madvise", lambda start, length, advice: calls.append((start, length, advice)))
    small = host_memory.empty_host(1024, dtype=torch.float32)
    assert calls == []
    big = host_memory.empty_host(8 << 20, dtype=torch.uint8)
    (start, length, advice), = calls
    base = big.untyped_storage().data_ptr()
    assert advice == 14 and start % host_memory.HUGE_PAGE_BYTES == 0 and length % host_memory.HUGE_PAGE_BYTES == 0
    assert base <= start and start + length <= base + big.numel()
    del small


def test_pool_reuses_a_buffer_only_after_every_view_is_released():
    pool = host_memory.OutputPool()
    a = pool.empty((1024, 1024), torch.float32)
    a_ptr = a.data_ptr()
    view = a[3:5]
    del a
    b = pool.empty((1024, 1024), torch.float32)
    assert b.data_ptr() != a_ptr  # a view of the first buffer is still alive
    del view
    c = pool.empty((512, 1024), torch.float32)
    assert c.data_ptr() == a_ptr and c.shape == (512, 1024) and c.dtype == torch.float32
    assert pool.empty((4, 4), torch.float32).data_ptr() not in (a_ptr, b.data_ptr())  # small: not pooled


def test_pool_never_hands_out_a_buffer_twice():
    pool = host_memory.OutputPool()
    live = [pool.empty((1 << 20,), torch.uint8) for _ in range(host_memory.MAX_POOLED_ENTRIES + 3)]
    ptrs = {t.data_ptr() for t in live}
    assert len(ptrs) == len(live)
    for i, t in enumerate(live):
        t.fill_(i % 256)
    assert all(int(t[0]) == i % 256 for i, t in enumerate(live))


def test_pool_gives_back_released_bytes_beyond_the_cap(monkeypatch):
    monkeypatch.setattr(host_memory, "MAX_IDLE_BYTES", 2 << 20)
    pool = host_memory.OutputPool()
    first = [pool.empty((1 << 20,), torch.uint8) for _ in range(3)]
    oldest = first[0].data_ptr()
    del first  # three idle buffers, 3 MiB
    held = pool.empty((4 << 20,), torch.uint8)  # too large for the idle ones: a new buffer
    kept = [e.data_ptr() for e in pool._entries]
    assert len(kept) == 3 and held.data_ptr() in kept and oldest not in kept


def test_pool_hands_a_buffer_to_one_thread_at_a_time(monkeypatch):
    # Each thread stamps its buffer with its id, lets the others run, and checks the stamp survived.
    # The in-use test yields the GIL after reading the count, so without the pool's lock another
    # thread would see the same buffer released before the first caller holds a view of it.
    real_in_use = host_memory._in_use

    def yielding_in_use(t):
        used = real_in_use(t)
        time.sleep(0)
        return used

    monkeypatch.setattr(host_memory, "_in_use", yielding_in_use)
    pool, clashes = host_memory.OutputPool(), []
    start = threading.Barrier(4)

    def worker(tid):
        start.wait()
        for _ in range(500):
            t = pool.empty((1 << 18,), torch.float32)
            t[0] = tid
            time.sleep(0)
            if int(t[0]) != tid:
                clashes.append(tid)
            del t

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert clashes == []
