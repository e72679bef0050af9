"""``Config``: the immutable description of one library's JIT runtime."""
from __future__ import annotations

import os
from collections.abc import Sequence

from .env import check_prefix
from .errors import DeepJITError


def _absolute_normalised(path, empty_msg: str, relative_msg: str) -> str:
    path = os.fspath(path)
    if not path:
        raise DeepJITError(empty_msg)
    if not os.path.isabs(path):
        raise DeepJITError(relative_msg)
    return os.path.normpath(path)


class Config:
    """What a library tells the runtime about itself.

    ``extra_signature`` is folded into every cache key (it stands for untracked dependencies such
    as the library version); ``include_dirs`` are searched by the compiler and the include parser
    but their paths are not keyed; ``include_prefixes`` select which ``<...>`` includes are tracked.
    """

    __slots__ = ("python_library_root", "env_prefix", "extra_signature", "include_dirs", "include_prefixes")

    def __init__(self, python_library_root, env_prefix: str, extra_signature: str | bytes = "",
                 include_dirs: Sequence = (), include_prefixes: Sequence[str] = ()):
        root = _absolute_normalised(python_library_root, "Python library root must not be empty",
                                    "Python library root must be absolute")
        object.__setattr__(self, "python_library_root", root)
        object.__setattr__(self, "env_prefix", check_prefix(env_prefix, "environment prefix"))
        if not isinstance(extra_signature, (str, bytes)):
            raise TypeError(f"extra_signature: expected str or bytes, got {type(extra_signature).__name__}")
        object.__setattr__(self, "extra_signature", extra_signature)
        dirs = tuple(_absolute_normalised(d, "JIT include directory must not be empty",
                                          "JIT include directory must be absolute") for d in include_dirs)
        object.__setattr__(self, "include_dirs", dirs)
        prefixes = tuple(include_prefixes)
        for p in prefixes:
            if not isinstance(p, str):
                raise TypeError(f"include_prefixes: expected str entries, got {type(p).__name__}")
        object.__setattr__(self, "include_prefixes", prefixes)

    def __setattr__(self, name, value):
        raise AttributeError("Config is immutable")

    def get_python_path(self, relative: str) -> str:
        return os.path.join(self.python_library_root, os.path.normpath(relative))

    def with_include(self, include_dirs: Sequence = (), include_prefixes: Sequence[str] = ()) -> Config:
        """A copy with extra include dirs / prefixes appended (toolchains add their shared headers)."""
        return Config(self.python_library_root, self.env_prefix, self.extra_signature,
                      self.include_dirs + tuple(d for d in include_dirs if d not in self.include_dirs),
                      self.include_prefixes + tuple(p for p in include_prefixes if p not in self.include_prefixes))

    def to_json(self) -> dict:
        sig = self.extra_signature
        if isinstance(sig, bytes):
            sig = sig.decode("utf-8", "backslashreplace")
        return {"python_library_root": self.python_library_root, "extra_signature": sig,
                "include_dirs": list(self.include_dirs), "include_prefixes": list(self.include_prefixes)}

    def __repr__(self):
        return (f"Config(python_library_root={self.python_library_root!r}, env_prefix={self.env_prefix!r}, "
                f"extra_signature={self.extra_signature!r}, include_dirs={self.include_dirs!r}, "
                f"include_prefixes={self.include_prefixes!r})")
