"""The window's two host kernels (signal publish and bounded wait), compiled once per process.

Other libraries' host kernels that signal and wait inside one call (e.g. deep_ep's low-latency
dispatch) receive these two functions' addresses (``entry_points``) and call them, so the wait
policy and its failure checks have a single implementation."""
from __future__ import annotations

import ctypes

from ..library import KernelLibrary

__version__ = "0.1.0"

# Sources live beside this file; ``#include <symm/signals.hpp>`` resolves through the parent folder.
LIB = KernelLibrary("symm", "DJ_SYMM", __file__, __version__)


def notify_kernel():
    return LIB.host_kernel("symm_notify", "notify.cpp")


def wait_kernel():
    return LIB.host_kernel("symm_wait", "wait.cpp")


def entry_points() -> tuple[int, int]:
    """C addresses of ``symm_notify(addresses, count, value)`` and ``symm_wait(addresses, count,
    target, abort_word, pidfds, num_pidfds, timeout_ns, status)`` (see notify.cpp / wait.cpp)."""
    return tuple(ctypes.cast(k._fn, ctypes.c_void_p).value for k in (notify_kernel(), wait_kernel()))


# ---- the device transport's own Ascend kernels (symm/ascend/*.asc; twin for CPU tensors) ----------------
def ascend_args(struct: str, **fields):
    """The one launch argument of a transport kernel: ``ascend/kernel_args.h``'s ``struct`` by name."""
    from .. import descriptors, kernel_args
    return kernel_args.pack(descriptors.struct_type(LIB.source("ascend/kernel_args.h"), struct), **fields)


def put_signal_kernel():
    return LIB.ascend_kernel("dj_symm_put_signal", "ascend/put_signal.asc", {})


def wait_get_kernel():
    return LIB.ascend_kernel("dj_symm_wait_get", "ascend/wait_get.asc", {})
