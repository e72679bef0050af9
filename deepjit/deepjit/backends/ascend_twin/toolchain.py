"""The Ascend twin toolchain: the AscendC source bisheng would compile, built with the host C++
compiler against the twin's headers (``include/``) into a shared object that runs every block of a
launch on CPU threads.

The compiler hash (part of every cache key, and of ``meta.json`` through ``compiler_info``) holds the
twin's name and version, the host compiler's version, a digest of the twin's headers and TileLang's
version and template digest, so a change to any of them compiles afresh.

The headers every kernel includes (the twin's C API, and for TileLang sources the rewritten copies of
``tl_templates/ascend``) are parsed once into a precompiled header: a "prelude" cache entry of its
own (tag ``ascend_twin_prelude``), keyed by the compiler hash, the flags and the prelude's kind, that
each kernel compile force-includes. The prelude also holds ``launch.o``, the launch machinery
(``dj_twin/launch.h``) compiled once, which every kernel links instead of compiling it again (three
quarters of a kernel's build). Its ``meta.json`` records the artifacts' digests and a hit is verified like
a kernel's entry: a damaged ``.gch`` or ``launch.o`` is set aside and rebuilt.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import warnings

from ...config import Config
from ...disk_cache import DIGESTS_KEY, META, DiskCache, artifact_digests, makedirs, verify, write_file_sync
from ...errors import CompileError
from ...external import call_external_command, shell_join
from ...hashing import hash_hex
from .. import Backend
from ..host.toolchain import find_cxx
from ..params import strip_comments
from .device import TwinDevice
from .kernel import TwinKernel
from .options import DEFAULT_CXX_FLAGS, AscendLaunchOptions, TwinCompilerOptions
from .source import args_struct, launcher, parse_entry, rewrite_onchip_nulls, uses_lane_sync

NAME = "ascend-twin"
VERSION = "4"
INCLUDE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
DEFAULT_LAUNCH_TIMEOUT_SECS = 300
KERNEL_FILE, LAUNCHER_FILE, BINARY = "kernel.cpp", "kernel.twin.cpp", "kernel.so"
PRELUDE, PRELUDE_TAG = "prelude.h", "ascend_twin_prelude"
LAUNCH_SOURCE, LAUNCH_OBJECT = "launch.cpp", "launch.o"
_TL_INCLUDE_RE = re.compile(r'#\s*include\s*[<"](tl_templates/ascend/[\w./]+)[>"]')
# What each prelude kind includes: the C API for hand-written kernels and what every launcher's launch.h
# includes (launch_deps.h), plus TileLang's templates.
_PRELUDE_HEADERS = {
    "c_api": ("c_api/asc_simd.h", "simt_api/asc_simt.h", "simt_api/asc_bf16.h", "simt_api/asc_fp16.h",
              "simt_api/asc_fp8.h", "acl/acl.h", "dj_twin/launch_deps.h"),
    "tilelang": ("tl_templates/ascend/common.h", "tl_templates/ascend/debug.h", "tl_templates/ascend/gemm.h"),
}


def tree_digest(root: str) -> str:
    """SHA-256 over the relative paths and contents of every file under ``root``."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def tilelang_templates() -> tuple[str, str | None]:
    """(TileLang's version, its template root) or ("none", None) when TileLang is not installed.

    An installed wheel is read without importing it (its import takes ~11 s; a process whose lowerings
    are all cached needs none): TL_TEMPLATE_PATH, else the wheel's ``src``; a source checkout is imported."""
    spec = importlib.util.find_spec("tilelang")
    if spec is None:
        return "none", None
    package = next(iter(spec.submodule_search_locations or ()), None)
    if package and not os.path.exists(os.path.join(os.path.dirname(package), "VERSION")):
        wheel_root = os.path.join(package, "src")
        root = os.environ.get("TL_TEMPLATE_PATH") or (
            wheel_root if os.path.isdir(os.path.join(package, "3rdparty")) and os.path.isdir(wheel_root) else None)
        if root:
            try:
                return importlib.metadata.version("tilelang"), root
            except importlib.metadata.PackageNotFoundError:
                pass
    try:
        import tilelang
        from tilelang.env import TILELANG_TEMPLATE_PATH
    except ImportError:
        return "none", None
    return str(tilelang.__version__), TILELANG_TEMPLATE_PATH


class AscendTwinBackend(Backend):
    name = "ascend_twin"

    def __init__(self, env, config):
        super().__init__(env, config)
        self._device = TwinDevice()

    @property
    def device(self) -> TwinDevice:
        return self._device

    def discover(self) -> None:
        self.cxx = find_cxx(self.env)
        self.cxx_version = call_external_command([self.cxx, "--version"])
        self.header_digest = tree_digest(INCLUDE_DIR)
        self.tilelang_version, self.template_root = tilelang_templates()
        tl_dir = os.path.join(self.template_root, "tl_templates", "ascend") if self.template_root else None
        self.tilelang_digest = tree_digest(tl_dir) if tl_dir and os.path.isdir(tl_dir) else "none"

    def compiler_info(self) -> dict:
        return {"name": NAME, "version": VERSION, "path": self.cxx, "cxx_version": self.cxx_version,
                "header_digest": self.header_digest, "tilelang_version": self.tilelang_version,
                "tilelang_template_digest": self.tilelang_digest}

    def compiler_hash(self) -> str:
        return hash_hex(NAME, VERSION, self.cxx_version, self.header_digest, self.tilelang_version,
                        self.tilelang_digest)

    def effective_config(self, config: Config) -> Config:
        return config

    def default_compiler_options(self) -> TwinCompilerOptions:
        # -g is about a third of a twin build's compile time (the suite builds hundreds): on request only
        return TwinCompilerOptions(optimize_level=self.env.get_str("JIT_TWIN_OPT_LEVEL", "1"),
                                   debug_info=self.env.get_bool("JIT_KERNEL_DEBUG_INFO"),
                                   cpp_standard=self.env.get_str("JIT_TWIN_CPP_STANDARD", "20"),
                                   cxx_flags=DEFAULT_CXX_FLAGS, extra_cxx_flags=())

    def default_launch_options(self) -> AscendLaunchOptions:
        timeout = self.env.get_int("JIT_LAUNCH_TIMEOUT", DEFAULT_LAUNCH_TIMEOUT_SECS)
        return AscendLaunchOptions(num_ubuf_bytes=0, num_launch_timeout_secs=timeout)

    def _prelude(self, kind: str, flags: list[str]) -> str:
        """The published prelude entry of ``kind`` for these flags: ``include/`` (rewritten TileLang
        templates), ``prelude.h`` with its precompiled ``prelude.h.gch``, and ``launch.o``."""
        digest = hash_hex(self.compiler_hash(), kind, *flags)
        cache = DiskCache.from_env(self.env)
        entry = cache.entry(PRELUDE_TAG, digest)
        if entry.is_hit:  # verified like a kernel's entry: a damaged header, .gch or launch.o is rebuilt, not kept
            problem = verify(entry.final_path)
            if problem is None:
                return entry.final_path
            aside = cache.set_aside(entry.final_path)
            warnings.warn(f"deepjit: cached twin prelude {entry.final_path} {problem}; "
                          f"{'moved it to ' + aside if aside else 'it stays (read-only root)'} and rebuilding it",
                          RuntimeWarning, stacklevel=3)
            entry = cache.entry(PRELUDE_TAG, digest, rebuild=True)
        try:
            include_root = os.path.join(entry.tmp_path, "include")
            headers = _PRELUDE_HEADERS["c_api"]
            if kind == "tilelang":
                folder = os.path.join(self.template_root, "tl_templates", "ascend")
                for dirpath, _, filenames in os.walk(folder):
                    for name in filenames:
                        src = os.path.join(dirpath, name)
                        out = os.path.join(include_root, "tl_templates", "ascend", os.path.relpath(src, folder))
                        makedirs(os.path.dirname(out))
                        with open(src) as f:
                            write_file_sync(out, rewrite_onchip_nulls(f.read()))
                headers = headers + _PRELUDE_HEADERS["tilelang"]
            makedirs(include_root)
            write_file_sync(os.path.join(entry.tmp_path, PRELUDE), "".join(f"#include <{h}>\n" for h in headers))
            object_flags = [f for f in flags if f != "-shared"]   # the header and launch.o are no libraries
            argv = [self.cxx, *object_flags, f"-I{INCLUDE_DIR}", f"-I{include_root}",
                    "-x", "c++-header", os.path.join(entry.tmp_path, PRELUDE), "-o",
                    os.path.join(entry.tmp_path, PRELUDE + ".gch")]
            self.run(argv, cwd=entry.tmp_path)
            write_file_sync(os.path.join(entry.tmp_path, LAUNCH_SOURCE),
                            "#include <dj_twin/launch.h>  // launch() and the C entry points, linked by every kernel\n")
            launch_argv = [self.cxx, *object_flags, "-Winvalid-pch", f"-I{INCLUDE_DIR}",
                           f"-I{include_root}", "-include", os.path.join(entry.tmp_path, PRELUDE), "-c",
                           os.path.join(entry.tmp_path, LAUNCH_SOURCE), "-o", os.path.join(entry.tmp_path, LAUNCH_OBJECT)]
            self.run(launch_argv, cwd=entry.tmp_path)
            meta = {"kind": kind, "command": shell_join(argv), "launch_command": shell_join(launch_argv),
                    "compiler_info": self.compiler_info(),
                    DIGESTS_KEY: artifact_digests(entry.tmp_path)}
            write_file_sync(os.path.join(entry.tmp_path, META), json.dumps(meta, separators=(",", ":")))
            return entry.commit()
        finally:
            entry.abandon()

    def compile(self, source: str, build_dir: str, options: TwinCompilerOptions) -> str:
        build_dir = os.path.normpath(os.path.abspath(build_dir))
        entry = parse_entry(source)
        code = strip_comments(source)   # a commented-out include or barrier chooses nothing
        kind = "tilelang" if _TL_INCLUDE_RE.search(code) else "c_api"
        if kind == "tilelang" and not self.template_root:
            raise CompileError("the source includes tl_templates/ascend headers but TileLang is not installed")
        flags = options.get_flags() + (["-DDJ_TWIN_SIMT_FIBERS"] if uses_lane_sync(code) else [])
        prelude = self._prelude(kind, flags)
        write_file_sync(os.path.join(build_dir, "kernel.asc"), source)
        write_file_sync(os.path.join(build_dir, KERNEL_FILE), rewrite_onchip_nulls(source))
        args = args_struct(entry, source, self.config.include_dirs)
        write_file_sync(os.path.join(build_dir, LAUNCHER_FILE), launcher(entry, KERNEL_FILE, args))
        out = os.path.join(build_dir, BINARY)
        argv = [self.cxx, *flags, "-Winvalid-pch", f"-I{INCLUDE_DIR}", f"-I{os.path.join(prelude, 'include')}",
                *[f"-I{d}" for d in self.config.include_dirs], "-include", os.path.join(prelude, PRELUDE),
                os.path.join(build_dir, LAUNCHER_FILE), os.path.join(prelude, LAUNCH_OBJECT), "-o", out]
        self.run(argv, cwd=build_dir)
        self.require_output(out, "the twin's shared object (host compiler)")
        return shell_join(argv)

    def load(self, path: str) -> TwinKernel:
        return TwinKernel(path)


BACKEND = AscendTwinBackend
