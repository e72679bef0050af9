"""deepjit's Ascend CPU twin: AscendC compiled with the host C++ compiler and run on CPU threads
with dav-3510's cores, memories, layouts and synchronisation (see include/dj_twin/runtime.h)."""
from .device import TwinDevice
from .kernel import CoreCounters, LaunchCounters, TwinKernel, TwinLaunchError
from .options import AscendLaunchOptions, TwinCompilerOptions
from .toolchain import BACKEND, INCLUDE_DIR, NAME, VERSION, AscendTwinBackend

__all__ = ["BACKEND", "INCLUDE_DIR", "NAME", "VERSION", "AscendLaunchOptions", "AscendTwinBackend", "CoreCounters",
           "LaunchCounters", "TwinCompilerOptions", "TwinDevice", "TwinKernel", "TwinLaunchError"]
