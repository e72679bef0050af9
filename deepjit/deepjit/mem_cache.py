"""In-process single-flight cache: concurrent requests for one key run the factory once."""
from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class _Flight:
    """One factory run in progress; waiters block on ``done`` (a light stand-in for a Future,
    whose import alone costs more than a warm cache hit)."""

    __slots__ = ("done", "value", "error")

    def __init__(self):
        self.done = threading.Event()
        self.value = None
        self.error = None

    def result(self):
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value


class MemCache(Generic[V]):
    def __init__(self):
        self._lock = threading.Lock()
        self._values: dict[Hashable, V] = {}
        self._pending: dict[Hashable, _Flight] = {}

    def get(self, key):
        return self._values.get(key)

    def get_or_create(self, key: Hashable, factory: Callable[[], V]) -> V:
        """The cached value, or the factory's; a failure reaches every waiter and caches nothing."""
        value = self._values.get(key)
        if value is not None:
            return value
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                return value
            flight = self._pending.get(key)
            owner = flight is None
            if owner:
                flight = self._pending[key] = _Flight()
        if not owner:
            return flight.result()  # waits outside the lock
        try:
            value = factory()
        except BaseException as exc:
            with self._lock:
                del self._pending[key]
            flight.error = exc
            flight.done.set()
            raise
        with self._lock:
            self._values[key] = value
            del self._pending[key]
        flight.value = value
        flight.done.set()
        return value

    def __len__(self):
        return len(self._values)
