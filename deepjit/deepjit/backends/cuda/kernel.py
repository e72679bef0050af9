"""CUDA kernels: cubin load through the library API and ``cuLaunchKernelEx``."""
from __future__ import annotations

import ctypes
import os
import sys

from ...errors import DeepJITError
from ..args import declared_kinds, to_ctype
from ..params import read_declared_types
from . import driver
from .options import CudaLaunchOptions, dim3


def current_stream() -> int:
    import torch
    return int(torch.cuda.current_stream().cuda_stream)


class CudaKernel:
    def __init__(self, path: str):
        self._library = self._func = None
        self.path = path
        cubin = os.path.join(path, "kernel.cubin")
        if not os.path.isfile(cubin):
            raise DeepJITError(f"missing CUDA binary: {cubin}")
        lib, count = ctypes.c_void_p(), ctypes.c_uint(0)
        driver.call("cuLibraryLoadFromFile", ctypes.byref(lib), cubin.encode(), None, None, 0, None, None, 0)
        self._library = lib.value
        driver.call("cuLibraryGetKernelCount", ctypes.byref(count), lib)
        if count.value != 1:
            self.unload()
            raise DeepJITError(f"expected exactly one kernel in {cubin}, found {count.value}")
        kernel, func = ctypes.c_void_p(), ctypes.c_void_p()
        driver.call("cuLibraryEnumerateKernels", ctypes.byref(kernel), 1, lib)
        driver.call("cuKernelGetFunction", ctypes.byref(func), kernel)
        self._func = func.value
        self._smem_set = 0
        self.param_types = read_declared_types(os.path.join(path, "kernel.cu"))

    def launch(self, options: CudaLaunchOptions, *args):
        if self._func is None:
            raise DeepJITError("kernel must be loaded before launch")
        grid, block = dim3(options.grid, "grid"), dim3(options.block, "block")
        smem = options.num_smem_bytes or 0
        if smem < 0:
            raise DeepJITError("CUDA dynamic shared memory size must not be negative")
        if smem > self._smem_set:
            driver.call("cuFuncSetAttribute", ctypes.c_void_p(self._func),
                        driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
            self._smem_set = smem
        attrs = []
        if options.cluster_dim and options.cluster_dim > 1:
            driver.call("cuFuncSetAttribute", ctypes.c_void_p(self._func),
                        driver.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
            attrs.append((driver.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, (options.cluster_dim, 1, 1)))
        if options.cooperative:
            attrs.append((driver.CU_LAUNCH_ATTRIBUTE_COOPERATIVE, (1,)))
        if options.enable_pdl:
            attrs.append((driver.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, (1,)))
        array = (driver.LaunchAttribute * max(1, len(attrs)))()
        for i, (attr_id, values) in enumerate(attrs):
            array[i].id = attr_id
            ctypes.memmove(array[i].value, (ctypes.c_uint * len(values))(*values), 4 * len(values))
        stream = options.stream if options.stream is not None else current_stream()
        cfg = driver.LaunchConfig(*grid, *block, smem, stream, array, len(attrs))
        kinds = declared_kinds(self.param_types, len(args))
        values = [to_ctype(i, a, k) for i, (a, k) in enumerate(zip(args, kinds, strict=True))]
        params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p)
                                                             for v in values])
        driver.call("cuLaunchKernelEx", ctypes.byref(cfg), ctypes.c_void_p(self._func), params, None)

    def unload(self) -> None:
        handle, self._library, self._func = self._library, None, None
        if handle is not None:
            try:
                driver.call("cuLibraryUnload", ctypes.c_void_p(handle))
            except Exception:  # noqa: BLE001 - best effort, as upstream
                pass

    def __del__(self):
        if sys is not None and not sys.is_finalizing():
            self.unload()
