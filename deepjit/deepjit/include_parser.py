"""Include tracking for cache keys: a line scanner, not a preprocessor (spec: deepjit §6)."""
from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from .errors import DeepJITError
from .hashing import FNV1a

_BLANKS = " \t\f\v"


def scan_include(line: str) -> str | None:
    """Returns the ``<name>`` of an include line, None when the line is not a bracket include.

    Quoted includes are rejected outright: only ``<...>`` names can be resolved against the
    configured include dirs, so a quoted one would silently escape the cache key.
    """
    s = line.lstrip(_BLANKS)
    if not s.startswith("#"):
        return None
    s = s[1:].lstrip(_BLANKS)
    if not s.startswith("include"):
        return None
    s = s[len("include"):].lstrip(_BLANKS)
    if not s or s[0] not in "<\"":
        return None
    opener = s[0]
    closers = [i for i in (s.find(">", 1), s.find("\"", 1)) if i >= 0]
    if not closers:
        return None
    end = min(closers)
    name = s[1:end]
    if opener == "\"" or s[end] == "\"" or not name or name != name.strip():
        raise DeepJITError(f"non-standard include: {s[:end + 1]}")
    return name


class IncludeParser:
    """Hashes a source together with every tracked header it reaches, recursively."""

    def __init__(self, include_dirs: Sequence[str], include_prefixes: Sequence[str]):
        self.include_dirs = tuple(include_dirs)
        self.include_prefixes = tuple(include_prefixes)
        self._memo: dict[str, str] = {}
        self._visiting: set[str] = set()
        self._lock = threading.RLock()

    def is_tracked(self, name: str) -> bool:
        return any(name.startswith(p) for p in self.include_prefixes)

    def resolve(self, name: str) -> str:
        for d in self.include_dirs:
            path = os.path.join(d, name)
            if os.path.isfile(path):
                return path
        return os.path.join(self.include_dirs[0], name) if self.include_dirs else name

    def _hash_code(self, code: bytes) -> str:
        h = FNV1a().update(code)
        for line in code.decode("utf-8", "surrogateescape").split("\n"):
            name = scan_include(line)
            if name is not None and self.is_tracked(name):
                h.update(self.hash_include(name))
        return h.hexdigest()

    def hash_include(self, name: str) -> str:
        with self._lock:
            if name in self._memo:
                return self._memo[name]
            if name in self._visiting:
                raise DeepJITError(f"circular include may occur: {name}")
            self._visiting.add(name)
            try:
                path = self.resolve(name)
                try:
                    with open(path, "rb") as f:
                        code = f.read()
                except OSError:
                    raise DeepJITError(f"failed to open: {path}") from None
                digest = self._hash_code(code)
            finally:
                self._visiting.discard(name)
            self._memo[name] = digest
            return digest

    def parse_into_hash(self, code) -> str:
        if isinstance(code, str):
            code = code.encode("utf-8")
        with self._lock:
            return self._hash_code(bytes(code))

    def tracked_includes(self, code: str) -> list[str]:
        """The tracked include names of one source, in line order (not recursive)."""
        out = []
        for line in code.split("\n"):
            name = scan_include(line)
            if name is not None and self.is_tracked(name):
                out.append(name)
        return out
