"""The one deepjit library object of tile_kernels (LIB), its version, and the output pool of its host kernels
(the backend table is ``_dispatch.TABLE``)."""
import torch

import deepjit
from deepjit.host_memory import OutputPool

__version__ = "0.1.0+tilekernels.2.0.0"  # the suite's 0.1.0, mirroring upstream TileKernels 2.0.0 (moe_topk_gate_forward; commit 36d9e45 for the rest)

LIB = deepjit.KernelLibrary("tile_kernels", "TK", __file__, __version__)



def host_kernel(name: str, source: str, **defines):
    """A compiled host kernel from ``tile_kernels/host/<source>``."""
    return LIB.host_kernel(name, f"host/{source}", defines)


def set_threads(n: int) -> None:
    LIB.set_num_threads(n)


def threads() -> int:
    """An explicit setting (set_num_sms), else TK_/DJ_NUM_THREADS, else the core count."""
    return LIB.num_threads


# Large outputs come from one pool: once a caller has dropped an output, the next call of a kernel
# writes into the same (already faulted-in) pages instead of paying a page fault per page of a
# fresh buffer. Pooled buffers hold stale bytes, so every kernel writes each element it returns.
OUTPUTS = OutputPool()


def empty(*shape, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised host-kernel output: large ones from OUTPUTS (huge pages, reused once released)."""
    return OUTPUTS.empty(shape, dtype)
