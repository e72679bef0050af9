"""deep_ep's kernel library (LIB): host kernels compiled by deepjit, and the per-rank thread count."""
from __future__ import annotations

import os

import deepjit
from deepjit import descriptors

__version__ = "0.1.0+deepep.2.5"  # the suite's 0.1.0, mirroring upstream DeepEP V2.5 (main 93eb6eb)

LIB = deepjit.KernelLibrary("deep_ep", "EP", __file__, __version__)

_SOURCES = {
    "ep_dispatch_plan": "host/dispatch_plan.cpp",
    "ep_dispatch_send": "host/dispatch_send.cpp",
    "ep_dispatch_recv": "host/dispatch_recv.cpp",
    "ep_combine_send": "host/combine_send.cpp",
    "ep_combine_reduce": "host/combine_reduce.cpp",
    "ep_fp8_cast": "host/fp8_cast.cpp",
    "ep_ll_dispatch": "host/ll_dispatch.cpp",
    "ep_ll_combine": "host/ll_combine.cpp",
    "ep_engram_gather": "host/engram_gather.cpp",
}


def kernel(name: str):
    return LIB.host_kernel(name, _SOURCES[name])


def launch_args(header: str, name: str, **fields):
    """``struct name`` of ``host/<header>`` filled by name (deepjit.descriptors), for kernels with many arguments."""
    return descriptors.pack(descriptors.struct_type(LIB.source(f"host/{header}"), name), **fields)


def threads_per_rank(num_local_ranks: int) -> int:
    """Worker threads for one rank's kernels: ``EP_NUM_THREADS``/``DJ_NUM_THREADS`` if set, else the
    cores shared evenly among the ranks of this host (ranks run at the same time)."""
    if LIB.env.lookup("NUM_THREADS")[0] is not None or LIB._num_threads is not None:
        return LIB.num_threads
    return max(1, (os.cpu_count() or 1) // max(1, num_local_ranks))
