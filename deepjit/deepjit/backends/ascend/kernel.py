"""Ascend kernels: name discovery from the binary, ACL load, argument packing and launch."""
from __future__ import annotations

import ctypes
import os
import sys

from ... import elf
from ...env import get_env_bool
from ...errors import DeepJITError
from ..args import pack_ascend_args
from ..params import read_declared_types, read_sched_mode
from . import acl
from .options import AscendLaunchOptions

BINARY, AICPU_BINARY, SOURCE = "kernel.o", "kernel.aicpu.so", "kernel.asc"
AICPU_INTERFACE_SUFFIX = "_interface"


def binary_path(path: str) -> str:
    aicpu = os.path.join(path, AICPU_BINARY)
    if os.path.isfile(aicpu):
        return aicpu
    binary = os.path.join(path, BINARY)
    if not os.path.isfile(binary):
        raise DeepJITError(f"missing Ascend binary: {binary}")
    return binary


def kernel_names(binary: str) -> list[str]:
    """AICore: ``.ascend.meta.<name>`` sections; AICPU: exported ``n`` that has an ``n_interface``."""
    if binary.endswith(AICPU_BINARY):
        funcs = {n for n, t in elf.exported_symbols(binary, kinds=(elf.STT_FUNC,)).items()}
        return sorted(n for n in funcs if n + AICPU_INTERFACE_SUFFIX in funcs)
    return elf.ascend_kernel_names(binary)


def current_stream() -> int:
    """torch_npu's current stream as a raw ``aclrtStream`` address."""
    try:
        import torch
        import torch_npu  # noqa: F401
        return int(torch.npu.current_stream().npu_stream)
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable NPU stream
        raise DeepJITError(f"no Ascend launch stream given and torch_npu's current stream is unavailable: {exc}") from None


class AscendKernel:
    def __init__(self, path: str):
        self._bin: int | None = None
        self._func: int | None = None
        self._data = None
        self.path = path
        self.binary = binary_path(path)
        self.aicpu = self.binary.endswith(AICPU_BINARY)
        self.name = elf.expect_one_kernel(kernel_names(self.binary), self.binary)
        bin_handle, func = ctypes.c_void_p(), ctypes.c_void_p()
        if self.aicpu:
            with open(self.binary, "rb") as f:
                self._data = ctypes.create_string_buffer(f.read())  # ACL keeps pointing at these bytes
            opt = acl.BinaryLoadOption(type=acl.ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE)
            opt.value[0] = acl.CPU_KERNEL_MODE_FROM_DATA
            opts = acl.BinaryLoadOptions(options=ctypes.pointer(opt), numOpt=1)
            acl.call("aclrtBinaryLoadFromData", self._data, len(self._data.raw) - 1, ctypes.byref(opts),
                     ctypes.byref(bin_handle))
            self._bin = bin_handle.value
            acl.call("aclrtRegisterCpuFunc", bin_handle, (self.name + AICPU_INTERFACE_SUFFIX).encode(),
                     self.name.encode(), ctypes.byref(func))
        else:
            acl.call("aclrtBinaryLoadFromFile", self.binary.encode(), None, ctypes.byref(bin_handle))
            self._bin = bin_handle.value
            acl.call("aclrtBinaryGetFunction", bin_handle, self.name.encode(), ctypes.byref(func))
        self._func = func.value
        self.param_types = read_declared_types(os.path.join(path, SOURCE), self.name)
        self.sched_mode = 0 if self.aicpu else read_sched_mode(os.path.join(path, SOURCE), self.name)

    def launch(self, options: AscendLaunchOptions, *args):
        if self._func is None:
            raise DeepJITError("kernel must be loaded before launch")
        options.validate(self.aicpu)
        payload = pack_ascend_args(args, self.param_types)
        attrs = []
        if self.sched_mode:  # the qualifier's batch mode, also as the launch attribute ACL documents for it
            attrs.append(acl.LaunchKernelAttr(id=acl.ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE,
                                              value=acl.LaunchKernelAttrValue(schemMode=self.sched_mode)))
        if options.num_ubuf_bytes > 0:
            attrs.append(acl.LaunchKernelAttr(id=acl.ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE,
                                              value=acl.LaunchKernelAttrValue(dynUBufSize=options.num_ubuf_bytes)))
        if options.num_launch_timeout_secs > 0:
            attrs.append(acl.LaunchKernelAttr(id=acl.ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT,
                                              value=acl.LaunchKernelAttrValue(timeout=options.num_launch_timeout_secs)))
        cfg = None
        if attrs:
            array = (acl.LaunchKernelAttr * len(attrs))(*attrs)
            cfg = ctypes.byref(acl.LaunchKernelCfg(attrs=array, numAttrs=len(attrs)))
        stream = options.stream if options.stream is not None else current_stream()
        buf = ctypes.create_string_buffer(payload, len(payload))
        acl.call("aclrtLaunchKernelWithHostArgs", self._func, options.num_blocks, stream, cfg, buf, len(payload),
                 None, 0)
        if get_env_bool("ASCEND_LAUNCH_BLOCKING"):
            acl.call("aclrtSynchronizeDevice")

    def unload(self) -> None:
        handle, self._bin, self._func = self._bin, None, None
        if handle is not None:
            try:
                acl.call("aclrtBinaryUnLoad", ctypes.c_void_p(handle))
            except Exception:  # noqa: BLE001 - unloading is best effort, as upstream
                pass

    def __del__(self):
        if sys is not None and not sys.is_finalizing():
            self.unload()

    def __repr__(self):
        return f"AscendKernel({self.name} @ {self.path})"
