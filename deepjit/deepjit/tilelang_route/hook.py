"""The compile hook: TileLang hands its AscendC source to DeepJIT's Ascend toolchain."""
from __future__ import annotations

import os
import threading

from ..config import Config
from ..hashing import FNV1a
from ..runtime import Runtime
from .lowering import entry_point

ENV_PREFIX = "TL_ASCEND"  # TL_ASCEND_JIT_CACHE_DIR, ... then DJ_JIT_*
CALLBACK = "tilelang_callback_ascend_compile"
# TileLang compiles its AscendC with these on top of DeepJIT's default bisheng flags.
TILELANG_BISHENG_FLAGS = ("-fPIC", "-std=c++20")

_lock = threading.Lock()
_runtime: Runtime | None = None
_installed = False


def _template_digest(template_root: str) -> str:
    """TileLang's headers include one another with quotes, which the include tracker rejects, so
    their contents are folded into the extra signature instead (hashed once per process)."""
    h = FNV1a()
    folder = os.path.join(template_root, "tl_templates", "ascend")
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                h.update(os.path.relpath(path, folder)).update(f.read())
    return h.hexdigest()


def route_config() -> Config:
    import tilelang
    from tilelang.env import TILELANG_TEMPLATE_PATH

    root = os.path.dirname(os.path.abspath(tilelang.__file__))
    signature = f"tilelang-{tilelang.__version__}-templates-{_template_digest(TILELANG_TEMPLATE_PATH)}"
    return Config(root, ENV_PREFIX, extra_signature=signature, include_dirs=[TILELANG_TEMPLATE_PATH])


def default_runtime() -> Runtime:
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = Runtime(route_config(), "ascend")
        return _runtime


def parse_arch(arch: str) -> int:
    """``dav-3510`` -> 3510."""
    digits = str(arch).removeprefix("dav-")
    if not digits.isdigit():
        raise ValueError(f"arch: expected an Ascend architecture like 'dav-3510', got {arch!r}")
    return int(digits)


def compile_ascendc(source: str, arch: int, extra_bisheng_flags=(), runtime: Runtime | None = None) -> str:
    """Compiles TileLang-generated AscendC through DeepJIT; returns the published entry directory."""
    from ..backends.ascend import AscendCompilerOptions

    runtime = runtime or default_runtime()
    options = AscendCompilerOptions(arch=arch, extra_bisheng_flags=TILELANG_BISHENG_FLAGS + tuple(extra_bisheng_flags))
    return runtime.compile_without_load(entry_point(source), source, options)


def install(runtime: Runtime | None = None) -> None:
    """Routes TileLang's Ascend compile step through ``runtime`` (default: one lazily created
    Ascend runtime with prefix ``TL_ASCEND``). Replaces TileLang's own callback."""
    global _installed
    import tilelang  # noqa: F401 - registers the Ascend backend (and its own callback) first
    import tvm_ffi
    from tilelang.contrib import bisheng
    from tilelang.transform import PassConfigKey

    from ..backends.ascend.kernel import BINARY

    def callback(code, target, pass_config=None):
        flags = bisheng.normalize_options((pass_config or {}).get(PassConfigKey.TL_DEVICE_COMPILE_FLAGS))
        path = compile_ascendc(code, parse_arch(bisheng.get_target_npu_arch(target)), flags, runtime)
        with open(os.path.join(path, BINARY), "rb") as f:
            return bytearray(f.read())

    tvm_ffi.register_global_func(CALLBACK, f=callback, override=True)
    _installed = True


def uninstall() -> None:
    """Gives TileLang its own compile callback back."""
    global _installed
    import tvm_ffi
    from tilelang.ascend.backend import tilelang_callback_ascend_compile

    tvm_ffi.register_global_func(CALLBACK, f=tilelang_callback_ascend_compile, override=True)
    _installed = False


def installed() -> bool:
    return _installed
