"""Option structs shared by the toolchains: unset fields are None; overrides follow upstream rules."""
from __future__ import annotations

import dataclasses


def _freeze(value):
    if isinstance(value, list):
        return tuple(value)
    return value


class Options:
    """Base for a toolchain's compiler or launch options (frozen dataclasses).

    ``override_with``: a field set in the override (``False``/``0``/empty count as set) replaces
    the default; fields named ``extra_*`` are appended, defaults first.
    """

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _freeze(getattr(self, f.name)))

    def override_with(self, other):
        if other is None:
            return self
        if not isinstance(other, type(self)):
            raise TypeError(f"options must be {type(self).__name__}, got {type(other).__name__}")
        changes = {}
        for f in dataclasses.fields(self):
            new = getattr(other, f.name)
            if new is None:
                continue
            old = getattr(self, f.name)
            changes[f.name] = (tuple(old or ()) + tuple(new)) if f.name.startswith("extra_") else new
        return dataclasses.replace(self, **changes) if changes else self

    def to_json(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out
