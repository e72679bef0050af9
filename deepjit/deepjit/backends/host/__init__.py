from .kernel import HostKernel, discover_kernels
from .options import HostCompilerOptions, HostLaunchOptions
from .toolchain import BACKEND, INCLUDE_DIR, HostBackend, cpu_identity

__all__ = ["BACKEND", "HostBackend", "HostCompilerOptions", "HostKernel", "HostLaunchOptions", "INCLUDE_DIR",
           "cpu_identity", "discover_kernels"]
