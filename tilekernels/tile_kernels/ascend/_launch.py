"""Compiling and launching tile_kernels' TileLang Ascend kernels through deepjit.

Each kernel module builds a PrimFunc for one static shape (``functools.lru_cache`` keeps the built
PrimFunc, deepjit's cache the compiled kernel). CPU tensors run on deepjit's Ascend CPU twin.
TileLang emits the kernel's C parameters in its own order (not the PrimFunc's), so tensors are
matched to the entry's parameters by name."""
from __future__ import annotations

import functools
import re

import torch

_PARAMS_RE = re.compile(r'extern\s+"C"\s+__global__[^(]*?\bvoid\s+\w+\s*\(([^)]*)\)')


@functools.lru_cache(maxsize=None)
def _lowered(prim_func):
    from deepjit.tilelang_route.twin import lower_with_grid

    lowered, num_blocks = lower_with_grid(prim_func)
    names = [p.strip().split("*")[-1].strip() for p in _PARAMS_RE.search(lowered.source).group(1).split(",")]
    order = {buf.name: i for i, buf in enumerate(prim_func.buffer_map[p] for p in prim_func.params)}
    return lowered, num_blocks, [order[n] for n in names]


def source(prim_func) -> str:
    """The AscendC TileLang generates for ``prim_func``."""
    return _lowered(prim_func)[0].source


def launch(prim_func, *tensors: torch.Tensor) -> None:
    """Runs ``prim_func`` with ``tensors`` (contiguous, in the PrimFunc's parameter order) as global memory."""
    from deepjit.backends.ascend_twin import AscendLaunchOptions
    from deepjit.tilelang_route import twin_runtime

    if any(t.device.type != "cpu" for t in tensors):
        raise NotImplementedError("tile_kernels' Ascend kernels run on CPU tensors through the twin until "
                                  "deepjit's KernelLibrary.ascend_kernel launches them on NPUs")
    lowered, num_blocks, order = _lowered(prim_func)
    runtime = twin_runtime()
    kernel = runtime.compile(lowered.entry, lowered.source)
    runtime.launch(kernel, AscendLaunchOptions(num_blocks=num_blocks), *(tensors[i] for i in order))
