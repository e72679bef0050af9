"""The CUDA driver API calls DeepJIT needs, bound lazily through ctypes on ``libcuda.so.1``."""
from __future__ import annotations

import ctypes

from ...errors import DeepJITError
from ..shared_library import SharedLibrary

CUDA_SUCCESS = 0
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


library = SharedLibrary("libcuda.so.1", "the NVIDIA driver", init=lambda lib: check(lib.cuInit(0), "cuInit", lib))
available = library.available


def check(code: int, expression: str, lib=None) -> None:
    if code == CUDA_SUCCESS:
        return
    name = ctypes.c_char_p()
    try:
        (lib or library()).cuGetErrorString(code, ctypes.byref(name))
    except Exception:  # noqa: BLE001 - the message is a courtesy
        pass
    raise DeepJITError(f"{expression} failed with CUDA error {code}: "
                       f"{name.value.decode() if name.value else 'unknown'}")


def call(name: str, *args) -> None:
    check(getattr(library(), name)(*args), name)
