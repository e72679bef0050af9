"""The twin's device properties: dav-3510 (Ascend 950) as the asc-devkit headers describe it, so
glue that sizes launches by the device's core counts behaves as on the chip."""
from __future__ import annotations

from ..ascend.device import DeviceProperties

# include/dj_twin/runtime.h: 32 AIC + 64 AIV, UB 248 KiB per vector core (asc-devkit
# impl/basic_api/utils/kernel_utils_constants.h, __NPU_ARCH__ == 3510).
PROPERTIES = DeviceProperties(soc_name="Ascend950-twin", num_aicpu_cores=0, num_aicore_cores=32, num_cube_cores=32,
                              num_vec_cores=64, num_lanes_per_warp=32, num_max_threads_per_vec_core=2048,
                              num_ubuf_bytes_per_vec_core=248 * 1024, num_total_global_mem_bytes=0,
                              num_l2_cache_bytes=0, npu_arch=3510)


class TwinDevice:
    def get_prop(self) -> DeviceProperties:
        return PROPERTIES

    def get_npu_arch(self) -> int:
        return PROPERTIES.npu_arch

    def get_num_aicore_cores(self) -> int:
        return PROPERTIES.num_aicore_cores

    def get_num_sms(self) -> int:
        return PROPERTIES.num_aicore_cores

    def get_num_vec_cores(self) -> int:
        return PROPERTIES.num_vec_cores

    def get_num_cube_cores(self) -> int:
        return PROPERTIES.num_cube_cores

    def get_num_vec_cores_per_ai_core(self) -> int:
        return PROPERTIES.num_vec_cores // PROPERTIES.num_aicore_cores

    def get_num_l2_cache_bytes(self) -> int:
        return PROPERTIES.num_l2_cache_bytes

    def get_num_ubuf_bytes_per_vec_core(self) -> int:
        return PROPERTIES.num_ubuf_bytes_per_vec_core
