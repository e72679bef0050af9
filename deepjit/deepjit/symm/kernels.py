"""The window's two host kernels (signal publish and bounded wait), compiled once per process."""
from __future__ import annotations

from ..library import KernelLibrary

__version__ = "0.1.0"

# Sources live beside this file; ``#include <symm/signals.hpp>`` resolves through the parent folder.
LIB = KernelLibrary("symm", "DJ_SYMM", __file__, __version__)


def notify_kernel():
    return LIB.host_kernel("symm_notify", "notify.cpp")


def wait_kernel():
    return LIB.host_kernel("symm_wait", "wait.cpp")
