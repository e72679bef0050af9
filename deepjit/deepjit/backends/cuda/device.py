"""CUDA device queries (current device), made on first access and cached."""
from __future__ import annotations

import ctypes

from . import driver


class CudaDevice:
    def __init__(self):
        self._cc: tuple[int, int] | None = None
        self._sms: int | None = None

    def _attr(self, attr: int) -> int:
        dev, out = ctypes.c_int(0), ctypes.c_int(0)
        driver.call("cuCtxGetDevice", ctypes.byref(dev))
        driver.call("cuDeviceGetAttribute", ctypes.byref(out), attr, dev)
        return out.value

    def compute_capability(self) -> tuple[int, int]:
        if self._cc is None:
            self._cc = (self._attr(driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                        self._attr(driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        return self._cc

    def get_arch(self, family: bool = True) -> str:
        """``<maj><min>`` below sm90, ``90a`` for 9.x, ``<maj>f`` (family) or ``<maj>a`` from 10 on."""
        major, minor = self.compute_capability()
        if major < 9:
            return f"{major}{minor}"
        if major == 9:
            return "90a"
        return f"{major}{minor}{'f' if family else 'a'}"

    def get_num_sms(self) -> int:
        if self._sms is None:
            self._sms = self._attr(driver.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        return self._sms
