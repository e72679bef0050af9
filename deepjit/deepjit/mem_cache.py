"""In-process single-flight cache: concurrent requests for one key run the factory once."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class MemCache(Generic[V]):
    def __init__(self):
        self._lock = threading.Lock()
        self._values: dict[Hashable, V] = {}
        self._pending: dict[Hashable, Future] = {}

    def get(self, key):
        return self._values.get(key)

    def get_or_create(self, key: Hashable, factory: Callable[[], V]) -> V:
        value = self._values.get(key)
        if value is not None:
            return value
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                return value
            future = self._pending.get(key)
            owner = future is None
            if owner:
                future = self._pending[key] = Future()
        if not owner:
            return future.result()
        try:
            value = factory()
        except BaseException as exc:
            with self._lock:
                del self._pending[key]
            future.set_exception(exc)
            raise
        with self._lock:
            self._values[key] = value
            del self._pending[key]
        future.set_result(value)
        return value

    def __len__(self):
        return len(self._values)
