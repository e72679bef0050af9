"""The library's handle on deepjit: host kernels, backend choice, worker threads."""
import deepjit

from . import __version__

LIB = deepjit.KernelLibrary("deep_gemm", "DG", __file__, __version__)
DEFAULT_NUM_THREADS = LIB.num_threads
