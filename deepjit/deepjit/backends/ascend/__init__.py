from .device import AscendDevice, DeviceProperties
from .kernel import AscendKernel, kernel_names
from .options import AscendCompilerOptions, AscendLaunchOptions
from .toolchain import BACKEND, AscendBackend, find_home

__all__ = ["BACKEND", "AscendBackend", "AscendCompilerOptions", "AscendDevice", "AscendKernel", "AscendLaunchOptions",
           "DeviceProperties", "find_home", "kernel_names"]
