"""Ascend device queries through ACL, made on first access and cached (spec: deepjit §10.6)."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ...errors import DeepJITError
from . import acl


@dataclass(frozen=True)
class DeviceProperties:
    soc_name: str
    num_aicpu_cores: int
    num_aicore_cores: int
    num_cube_cores: int
    num_vec_cores: int
    num_lanes_per_warp: int
    num_max_threads_per_vec_core: int
    num_ubuf_bytes_per_vec_core: int
    num_total_global_mem_bytes: int
    num_l2_cache_bytes: int
    npu_arch: int


_ATTRS = (("num_aicpu_cores", acl.ACL_DEV_ATTR_AICPU_CORE_NUM), ("num_aicore_cores", acl.ACL_DEV_ATTR_AICORE_CORE_NUM),
          ("num_cube_cores", acl.ACL_DEV_ATTR_CUBE_CORE_NUM), ("num_vec_cores", acl.ACL_DEV_ATTR_VECTOR_CORE_NUM),
          ("num_lanes_per_warp", acl.ACL_DEV_ATTR_WARP_SIZE),
          ("num_max_threads_per_vec_core", acl.ACL_DEV_ATTR_MAX_THREAD_PER_VECTOR_CORE),
          ("num_ubuf_bytes_per_vec_core", acl.ACL_DEV_ATTR_UBUF_PER_VECTOR_CORE),
          ("num_total_global_mem_bytes", acl.ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE),
          ("num_l2_cache_bytes", acl.ACL_DEV_ATTR_L2_CACHE_SIZE), ("npu_arch", acl.ACL_DEV_ATTR_NPU_ARCH))


class AscendDevice:
    def __init__(self):
        self._prop: DeviceProperties | None = None

    def get_prop(self) -> DeviceProperties:
        if self._prop is None:
            index = ctypes.c_int32(0)
            acl.call("aclrtGetDevice", ctypes.byref(index))
            soc = acl.fn("aclrtGetSocName")()
            if not soc:
                raise DeepJITError("aclrtGetSocName() returned null")
            values = {}
            for field, attr in _ATTRS:
                out = ctypes.c_int64(0)
                acl.check(acl.fn("aclrtGetDeviceInfo")(index.value, attr, ctypes.byref(out)),
                          f"aclrtGetDeviceInfo({field})")
                values[field] = out.value
            self._prop = DeviceProperties(soc_name=soc.decode(), **values)
        return self._prop

    def get_npu_arch(self) -> int:
        return self.get_prop().npu_arch

    def get_num_aicore_cores(self) -> int:
        return self.get_prop().num_aicore_cores

    def get_num_sms(self) -> int:
        return self.get_prop().num_aicore_cores

    def get_num_vec_cores(self) -> int:
        return self.get_prop().num_vec_cores

    def get_num_cube_cores(self) -> int:
        return self.get_prop().num_cube_cores

    def get_num_vec_cores_per_ai_core(self) -> int:
        p = self.get_prop()
        if p.num_aicore_cores <= 0 or p.num_vec_cores % p.num_aicore_cores:
            raise DeepJITError(f"vector cores ({p.num_vec_cores}) are not a multiple of AI cores ({p.num_aicore_cores})")
        return p.num_vec_cores // p.num_aicore_cores

    def get_num_l2_cache_bytes(self) -> int:
        return self.get_prop().num_l2_cache_bytes

    def get_num_ubuf_bytes_per_vec_core(self) -> int:
        return self.get_prop().num_ubuf_bytes_per_vec_core
