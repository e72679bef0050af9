"""Environment resolution: ``<PREFIX>_X`` if present (even empty), then ``DJ_X``, never bare ``X``."""
from __future__ import annotations

import os
import re

from .errors import DeepJITError

GLOBAL_PREFIX = "DJ"
_INT_RE = re.compile(r"-?[0-9]+\Z")  # from_chars: no "+", no blanks
_UINT_RE = re.compile(r"[0-9]+\Z")


def check_prefix(prefix: str, what: str = "environment prefix") -> str:
    if not isinstance(prefix, str) or not prefix:
        raise DeepJITError(f"{what} must not be empty")
    if prefix == GLOBAL_PREFIX:
        raise DeepJITError(f"{what} 'DJ' is reserved for global environment variables")
    return prefix


def parse_int(name: str, raw: str, *, unsigned: bool = False, bits: int = 64) -> int:
    if not (_UINT_RE if unsigned else _INT_RE).match(raw):
        raise DeepJITError(f"invalid value for {name}: {raw}")
    value = int(raw)
    lo, hi = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if not lo <= value <= hi:
        raise DeepJITError(f"invalid value for {name}: {raw}")
    return value


def parse_bool(name: str, raw: str) -> bool:
    low = raw.lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    return parse_int(name, raw) != 0


class Env:
    """Reads ``<prefix>_<suffix>`` then ``DJ_<suffix>``; the unprefixed name is never consulted."""

    def __init__(self, prefix: str):
        self.prefix = check_prefix(prefix)

    def lookup(self, suffix: str) -> tuple[str | None, str | None]:
        """Returns (variable name, raw value) of the first present variable, or (None, None)."""
        for name in (f"{self.prefix}_{suffix}", f"{GLOBAL_PREFIX}_{suffix}"):
            if name in os.environ:
                return name, os.environ[name]
        return None, None

    def get_str(self, suffix: str, default: str | None = None) -> str | None:
        name, raw = self.lookup(suffix)
        return default if name is None else raw

    def get_bool(self, suffix: str, default: bool = False) -> bool:
        name, raw = self.lookup(suffix)
        return default if name is None else parse_bool(name, raw)

    def get_int(self, suffix: str, default: int | None = None, *, unsigned: bool = False) -> int | None:
        name, raw = self.lookup(suffix)
        return default if name is None else parse_int(name, raw, unsigned=unsigned)


def get_env_bool(name: str, default: bool = False) -> bool:
    """An unprefixed standard variable (e.g. ``ASCEND_LAUNCH_BLOCKING``), read live."""
    raw = os.environ.get(name)
    return default if raw is None else parse_bool(name, raw)
