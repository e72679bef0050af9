from .device import CudaDevice
from .kernel import CudaKernel
from .options import CudaCompilerOptions, CudaLaunchOptions
from .toolchain import BACKEND, CudaBackend, find_cuda_home, parse_nvcc_version

__all__ = ["BACKEND", "CudaBackend", "CudaCompilerOptions", "CudaDevice", "CudaKernel", "CudaLaunchOptions",
           "find_cuda_home", "parse_nvcc_version"]
