"""The one deepjit library object of tile_kernels and the device dispatch helper."""
import os

import torch

import deepjit

from . import __version__

LIB = deepjit.KernelLibrary("tile_kernels", "TK", __file__, __version__)


def use_host(t: torch.Tensor) -> bool:
    """True when ``t``'s device is served by the host kernels (CPU with a working compiler)."""
    return LIB.backend_for(t.device) == "host"


def host_kernel(name: str, source: str, **defines):
    """A compiled host kernel from ``tile_kernels/host/<source>``."""
    return LIB.host_kernel(name, f"host/{source}", defines)


_CPU_COUNT = os.cpu_count() or 1
_explicit_threads: list[int] = []  # set_num_sms's value, once called


def set_threads(n: int) -> None:
    LIB.set_num_threads(n)
    _explicit_threads[:] = [n]


def threads() -> int:
    """LIB.num_threads (an explicit setting, else TK_/DJ_NUM_THREADS, else the core count) with
    the core count read once: os.cpu_count() costs several microseconds per call, as much as a
    small kernel."""
    if _explicit_threads:
        return _explicit_threads[0]
    return LIB.env.get_int("NUM_THREADS", None) or _CPU_COUNT


_HUGE = 1 << 21
_MADV_HUGEPAGE = 14


def _madvise():
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return fn
    except (OSError, AttributeError):
        return None


_madvise_fn = _madvise()


def empty(*shape, dtype: torch.dtype) -> torch.Tensor:
    """torch.empty for a host kernel's output. Large outputs are fresh, untouched mappings; asking
    for transparent huge pages before the kernel's first touch cuts the page-fault cost, which
    otherwise dominates a memory-bound kernel writing hundreds of MB (about 4x on Linux with THP
    in "madvise" mode)."""
    t = torch.empty(*shape, dtype=dtype)
    nbytes = t.numel() * t.element_size()
    if _madvise_fn is not None and nbytes >= 4 * _HUGE:
        start = (t.data_ptr() + _HUGE - 1) & ~(_HUGE - 1)
        end = (t.data_ptr() + nbytes) & ~(_HUGE - 1)
        if end > start:
            _madvise_fn(start, end - start, _MADV_HUGEPAGE)
    return t
