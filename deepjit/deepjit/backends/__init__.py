"""Toolchains. Each shares the runtime's key, caches and publication, and supplies only:
discovery and compiler info, option structs, ``compile`` into a build dir, and ``load``."""
from __future__ import annotations

import importlib
import os
from collections.abc import Sequence

from ..config import Config
from ..env import Env
from ..errors import CompileError, DeepJITError
from ..external import call_compiler

BACKENDS = ("host", "ascend", "cuda", "ascend_twin")


class Backend:
    """Construction is cheap; ``discover`` finds the toolkit and runs ``--version`` (the runtime
    calls it after reading the default options and cache roots, the upstream order)."""

    name = "abstract"

    def __init__(self, env: Env, config: Config):
        self.env = env
        self.config = config

    def discover(self) -> None:
        raise NotImplementedError

    @property
    def device(self):
        raise DeepJITError(f"the {self.name} toolchain has no device queries")

    def effective_config(self, config: Config) -> Config:
        """The config the runtime keys and compiles with (a toolchain may add shared headers)."""
        return config

    def compiler_info(self) -> dict:
        raise NotImplementedError

    def compiler_hash(self) -> str:
        raise NotImplementedError

    def default_compiler_options(self):
        raise NotImplementedError

    def default_launch_options(self):
        raise NotImplementedError

    def post_hook_hash(self, options, config: Config) -> str:
        return ""

    def compile(self, source: str, build_dir: str, options) -> str:
        """Compiles into ``build_dir``; returns the command string recorded in meta.json."""
        raise NotImplementedError

    def load(self, path: str):
        raise NotImplementedError

    def run(self, argv: Sequence[str], cwd: str) -> str:
        """Runs one compiler step (own process group, killed with this process); printed when JIT_DEBUG or
        JIT_PRINT_COMPILER_COMMAND (read live)."""
        show = self.env.get_bool("JIT_DEBUG") or self.env.get_bool("JIT_PRINT_COMPILER_COMMAND")
        return call_compiler(argv, cwd=cwd, print_command=show)

    @staticmethod
    def require_output(path: str, what: str) -> None:
        """A compiler step that exits 0 without writing ``path`` (or writing it empty) is a ``CompileError``."""
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            raise CompileError(f"{what} was not produced: {path}")


def get_backend(name: str) -> type:
    if name not in BACKENDS:
        raise DeepJITError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    module = importlib.import_module(f"{__name__}.{name}")
    return module.BACKEND
