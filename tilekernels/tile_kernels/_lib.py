"""The one deepjit library object of tile_kernels and the device dispatch helper."""
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


def threads() -> int:
    return LIB.num_threads
