"""The symmetric windows a twin launch may access in place (deepjit.symm.DeviceWindow registers its
twin windows here; kernel.py hands their ranges to each launch: dj_twin/symm.h). No deepjit imports:
the symm package and the twin both depend on this module, never on each other."""
from __future__ import annotations

import weakref

_LIVE: weakref.WeakSet = weakref.WeakSet()


def register(window) -> None:
    """``window.twin_regions()`` -> ``[(address, bytes, name)]`` is asked before every launch while it lives."""
    _LIVE.add(window)


def unregister(window) -> None:
    _LIVE.discard(window)


def regions() -> list[tuple[int, int, str]]:
    """Every live window's ranges in this process."""
    return [r for w in list(_LIVE) for r in w.twin_regions()]
