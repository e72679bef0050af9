"""Option structs shared by the toolchains: unset fields are None; overrides follow upstream rules."""
from __future__ import annotations

import dataclasses
import itertools

_TOKENS: dict = {}
_NEXT_TOKEN = itertools.count()     # next() is atomic: two threads never draw one token for two values


def _freeze(value):
    if isinstance(value, list):
        return tuple(value)
    return value


class Options:
    """Base for a toolchain's compiler or launch options (dataclasses).

    ``override_with``: a field set in the override (``False``/``0``/empty count as set) replaces
    the default; fields named ``extra_*`` are appended, defaults first. Fields may be set in place,
    as upstream's option structs: a runtime's ``default_compiler_options`` / ``default_launch_options``
    are its own and apply from the next compile or launch. Lists are stored as tuples.
    """

    def __setattr__(self, name, value):
        state = self.__dict__
        state[name] = _freeze(value)
        state.pop("_token", None)

    def memo_token(self) -> int:
        """A small int naming the current values (equal values, equal token), kept until the next edit:
        the cached compile path keys its memo by it on every call. TypeError for unhashable values."""
        state = self.__dict__
        token = state.get("_token")
        if token is None:
            values = (type(self), *(v for k, v in state.items() if k != "_token"))
            token = state["_token"] = _TOKENS.setdefault(values, next(_NEXT_TOKEN))
        return token

    def override_with(self, other):
        if other is None:
            return self
        if not isinstance(other, type(self)):
            raise TypeError(f"options: expected {type(self).__name__}, got {type(other).__name__}")
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
