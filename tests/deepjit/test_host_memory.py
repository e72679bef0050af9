"""Huge-page hint for large host outputs: same tensors as torch.empty, advice applied where large."""
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
