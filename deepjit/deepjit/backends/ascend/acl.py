"""The few ACL runtime calls DeepJIT needs, bound lazily through ctypes on ``libascendcl.so``."""
from __future__ import annotations

import ctypes

from ...errors import DeepJITError
from ..shared_library import SharedLibrary

LIBRARY = "libascendcl.so"
ACL_SUCCESS = 0
ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE = 3  # option type; its value 2 = register an AICPU .so from memory
CPU_KERNEL_MODE_FROM_DATA = 2

# aclrtLaunchKernelAttrId
ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE = 1  # value 0 normal, 1 batch scheduling
ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE = 2
ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT = 7

# aclrtDevAttr
ACL_DEV_ATTR_AICPU_CORE_NUM = 1
ACL_DEV_ATTR_AICORE_CORE_NUM = 101
ACL_DEV_ATTR_CUBE_CORE_NUM = 102
ACL_DEV_ATTR_VECTOR_CORE_NUM = 201
ACL_DEV_ATTR_WARP_SIZE = 202
ACL_DEV_ATTR_MAX_THREAD_PER_VECTOR_CORE = 203
ACL_DEV_ATTR_UBUF_PER_VECTOR_CORE = 204
ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE = 301
ACL_DEV_ATTR_L2_CACHE_SIZE = 302
ACL_DEV_ATTR_NPU_ARCH = 601


class LaunchKernelAttrValue(ctypes.Union):
    _fields_ = [("schemMode", ctypes.c_uint8), ("dynUBufSize", ctypes.c_uint32), ("timeout", ctypes.c_uint16),
                ("rsv", ctypes.c_uint32 * 4)]


class LaunchKernelAttr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("value", LaunchKernelAttrValue)]


class LaunchKernelCfg(ctypes.Structure):
    _fields_ = [("attrs", ctypes.POINTER(LaunchKernelAttr)), ("numAttrs", ctypes.c_size_t)]


class BinaryLoadOption(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("value", ctypes.c_uint32 * 4)]


class BinaryLoadOptions(ctypes.Structure):
    _fields_ = [("options", ctypes.POINTER(BinaryLoadOption)), ("numOpt", ctypes.c_size_t)]


_vp, _p = ctypes.c_void_p, ctypes.POINTER
_SIGNATURES = {
    "aclGetRecentErrMsg": (ctypes.c_char_p, []),
    "aclrtBinaryLoadFromFile": (ctypes.c_int, [ctypes.c_char_p, _vp, _p(_vp)]),
    "aclrtBinaryLoadFromData": (ctypes.c_int, [_vp, ctypes.c_size_t, _p(BinaryLoadOptions), _p(_vp)]),
    "aclrtBinaryUnLoad": (ctypes.c_int, [_vp]),
    "aclrtBinaryGetFunction": (ctypes.c_int, [_vp, ctypes.c_char_p, _p(_vp)]),
    "aclrtRegisterCpuFunc": (ctypes.c_int, [_vp, ctypes.c_char_p, ctypes.c_char_p, _p(_vp)]),
    "aclrtLaunchKernelWithHostArgs": (ctypes.c_int, [_vp, ctypes.c_uint32, _vp, _p(LaunchKernelCfg), _vp,
                                                     ctypes.c_size_t, _vp, ctypes.c_uint32]),
    "aclrtGetDevice": (ctypes.c_int, [_p(ctypes.c_int32)]),
    "aclrtGetSocName": (ctypes.c_char_p, []),
    "aclrtGetDeviceInfo": (ctypes.c_int, [ctypes.c_uint32, ctypes.c_int, _p(ctypes.c_int64)]),
    "aclrtSynchronizeDevice": (ctypes.c_int, []),
}
library = SharedLibrary(LIBRARY, "the ACL runtime of the CANN toolkit; searched the dynamic linker path")
available = library.available


def fn(name: str):
    f = getattr(library(), name)
    f.restype, f.argtypes = _SIGNATURES[name]
    return f


def check(code: int, expression: str) -> None:
    if code == ACL_SUCCESS:
        return
    try:
        message = fn("aclGetRecentErrMsg")()
    except Exception:
        message = None
    raise DeepJITError(f"{expression} failed with ACL error {code}: "
                       f"{message.decode(errors='replace') if message else 'unknown'}")


def call(name: str, *args) -> None:
    check(fn(name)(*args), name)
