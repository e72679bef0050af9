"""DeepJIT in Python: compile, cache, load and launch kernels at run time.

One runtime per library; toolchains for the host C++ compiler, Ascend (bisheng + ACL) and CUDA
(nvcc + driver API) share the cache key, the single-flight memory cache and the disk cache.
"""
from .backend_table import BackendTable, BackendUnavailableError, Impl
from .config import Config
from .disk_cache import CacheEntry, DiskCache
from .env import Env
from .errors import CacheSecurityError, CompileError, DeepJITError, ToolchainNotFoundError
from .hashing import FNV1a, hash_hex
from .include_parser import IncludeParser
from .library import KernelLibrary
from .mem_cache import MemCache
from .runtime import LazyInit, Runtime, create_lazy_jit, register_python_api

__version__ = "0.1.0"

__all__ = ["BackendTable", "BackendUnavailableError", "Impl", "CacheEntry", "CacheSecurityError", "CompileError", "Config", "DeepJITError", "DiskCache", "Env",
           "FNV1a", "IncludeParser", "KernelLibrary", "LazyInit", "MemCache", "Runtime", "ToolchainNotFoundError", "create_lazy_jit",
           "hash_hex", "host_include_dir", "register_python_api"]


def host_include_dir() -> str:
    """The folder holding ``deepjit/host/*.hpp``, on every host kernel's include path."""
    from .backends.host import INCLUDE_DIR
    return INCLUDE_DIR
