"""The Ascend toolchain: bisheng compiles AscendC, ld.lld links, ACL loads (spec: deepjit §10)."""
from __future__ import annotations

import os

from ...disk_cache import makedirs, write_file_sync
from ...errors import ToolchainNotFoundError
from ...external import call_external_command, shell_join
from ...hashing import hash_hex
from .. import Backend
from . import acl
from .device import AscendDevice
from .kernel import AICPU_BINARY, BINARY, AscendKernel
from .options import (
    DEFAULT_AICPU_FLAGS,
    DEFAULT_AICPU_LINKER_FLAGS,
    DEFAULT_BISHENG_FLAGS,
    DEFAULT_LINKER_FLAGS,
    AscendCompilerOptions,
    AscendLaunchOptions,
)

HOME_VARIABLES = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
DEFAULT_HOMES = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann")
DEEPJIT_INCLUDE = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "include"))
ADV_API_INCLUDE = os.path.join("aarch64-linux", "asc", "include", "adv_api")
DEFAULT_LAUNCH_TIMEOUT_SECS = 300


def find_home() -> str:
    """First non-empty of ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME, then the existing default installs."""
    home: str | None = next((os.environ[v] for v in HOME_VARIABLES if os.environ.get(v)), None)
    if home is None:
        home = next((d for d in DEFAULT_HOMES if os.path.exists(d)), None)
    if home is None or not os.path.isdir(home):
        looked = ", ".join([f"{v}={os.environ.get(v, '')!r}" for v in HOME_VARIABLES] + list(DEFAULT_HOMES))
        raise ToolchainNotFoundError(f"Ascend toolkit home was not found (looked at {looked})")
    return os.path.normpath(os.path.abspath(home))


class AscendBackend(Backend):
    name = "ascend"

    def __init__(self, env, config):
        super().__init__(env, config)
        self._device = AscendDevice()

    @property
    def device(self) -> AscendDevice:
        return self._device

    def discover(self) -> None:
        self.home = find_home()
        self.bisheng = os.path.join(self.home, "bin", "bisheng")
        self.linker = os.path.join(self.home, "bin", "ld.lld")
        for tool in (self.bisheng, self.linker):
            if not (os.path.isfile(tool) and os.access(tool, os.X_OK)):
                raise ToolchainNotFoundError(f"Ascend toolkit at {self.home} has no executable {tool}")
        self.adv_api_include = os.path.join(self.home, ADV_API_INCLUDE)
        if not os.path.isdir(self.adv_api_include):
            raise ToolchainNotFoundError(f"Ascend toolkit at {self.home} has no include directory {self.adv_api_include}")
        self.version = call_external_command([self.bisheng, "--version"])
        self.linker_version = call_external_command([self.linker, "--version"])

    def compiler_info(self) -> dict:
        return {"path": self.bisheng, "version": self.version, "linker_path": self.linker,
                "linker_version": self.linker_version}

    def compiler_hash(self) -> str:
        return hash_hex(self.version, self.linker_version)   # one FNV-1a chained over both, as DeepJIT

    def default_compiler_options(self) -> AscendCompilerOptions:
        # The architecture comes from the current device; without the ACL runtime (a CPU-only
        # machine) it stays unset and a compile must name it in its options.
        arch = self.device.get_npu_arch() if acl.available() else None
        return AscendCompilerOptions(optimize_level="2", arch=arch, debug_info=self.env.get_bool("JIT_KERNEL_DEBUG_INFO"),
                                     dump_asm=self.env.get_bool("JIT_DUMP_ASM"), bisheng_flags=DEFAULT_BISHENG_FLAGS,
                                     linker_flags=DEFAULT_LINKER_FLAGS, extra_bisheng_flags=(), extra_linker_flags=(),
                                     aicpu=False, aicpu_flags=DEFAULT_AICPU_FLAGS,
                                     aicpu_linker_flags=DEFAULT_AICPU_LINKER_FLAGS, extra_aicpu_flags=(),
                                     extra_aicpu_linker_flags=())

    def default_launch_options(self) -> AscendLaunchOptions:
        timeout = self.env.get_int("JIT_LAUNCH_TIMEOUT", DEFAULT_LAUNCH_TIMEOUT_SECS)
        return AscendLaunchOptions(num_ubuf_bytes=0, num_launch_timeout_secs=timeout)

    def base_argv(self, options: AscendCompilerOptions) -> list[str]:
        # deepjit's own device headers (dj_symm/device.h, the NPU image) and CANN SHMEM's (ACLSHMEM_HOME:
        # where hicann/shmem is installed; its aclshmem.h backs dj_symm on the NPU). `npu`: never run here.
        shmem = os.environ.get("ACLSHMEM_HOME")
        return ([self.bisheng, *options.get_bisheng_flags()] + [f"-I{d}" for d in self.config.include_dirs]
                + [f"-I{self.adv_api_include}", f"-I{DEEPJIT_INCLUDE}"]
                + ([f"-I{os.path.join(shmem, 'include')}"] if shmem else []))

    def compile(self, source: str, build_dir: str, options: AscendCompilerOptions) -> str:
        build_dir = os.path.normpath(os.path.abspath(build_dir))
        src = os.path.join(build_dir, "kernel.asc")
        rel = os.path.join(build_dir, "kernel.rel.o")
        out = os.path.join(build_dir, AICPU_BINARY if options.aicpu else BINARY)
        write_file_sync(src, source)
        base = self.base_argv(options)
        compile_argv = base + [src, "-o", rel]
        link_argv = [self.linker, *options.get_linker_flags(), rel, "-o", out]
        self.run(compile_argv, cwd=build_dir)
        self.run(link_argv, cwd=build_dir)
        if os.path.exists(rel):
            os.unlink(rel)
        self.require_output(out, "the Ascend binary (bisheng, ld.lld)")
        if options.dump_asm:
            asm = os.path.join(build_dir, "asm")
            makedirs(asm)
            dump = ["-S", src, "-o", os.path.join(asm, "kernel.s")] if options.aicpu else \
                ["-save-temps", src, "-o", os.path.join(asm, "kernel.rel.o")]
            self.run(base + dump, cwd=asm)
        return f"{shell_join(compile_argv)} && {shell_join(link_argv)}"

    def load(self, path: str) -> AscendKernel:
        return AscendKernel(path)


BACKEND = AscendBackend
