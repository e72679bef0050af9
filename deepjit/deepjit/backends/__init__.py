"""Toolchains. Each shares the runtime's key, caches and publication, and supplies only:
discovery and compiler info, option structs, ``compile`` into a build dir, and ``load``."""
from __future__ import annotations

import importlib

from ..config import Config
from ..env import Env
from ..errors import DeepJITError

BACKENDS = {"host": "host", "ascend": "ascend", "cuda": "cuda"}


class Backend:
    name = "abstract"

    def __init__(self, env: Env, config: Config):
        self.env = env
        self.config = config

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


def get_backend(name: str) -> type:
    if name not in BACKENDS:
        raise DeepJITError(f"unknown backend {name!r}; expected one of {sorted(BACKENDS)}")
    module = importlib.import_module(f"{__name__}.{BACKENDS[name]}")
    return module.BACKEND
