"""``EventHandle`` and ``EventOverlap`` on CPU.

There are no device streams on a CPU: work issued in the caller's thread is complete when the
call returns, so ``EventHandle()`` is an already-completed event. Asynchronous operations run on
a buffer's background comm worker; their ``EventHandle`` wraps that work's future, and waiting on
it blocks until the work is done (re-raising its error). On an NPU the same classes wrap a
``torch_npu`` event when one is given.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class EventHandle:
    def __init__(self, stream=None, *, future: Future | None = None, work=None):
        self._future = future
        self._work = work  # a torch.distributed Work of an asynchronous point-to-point transfer
        self._device_event = None
        if stream is not None and getattr(stream, "record_event", None) is not None:
            self._device_event = stream.record_event()

    def current_stream_wait(self) -> None:
        if self._future is not None:
            self._future.result()
        if self._work is not None:
            self._work.wait()
        if self._device_event is not None:
            self._device_event.wait()

    def query(self) -> bool:
        return (self._future is None or self._future.done()) and (self._work is None or self._work.is_completed())


class EventOverlap:
    """The event of an operation plus an optional hook run after the wait (V2.5 semantics: the
    deferred epilogue's result is returned by ``current_stream_wait()`` / ``wait()``)."""

    def __init__(self, event: EventHandle | None = None, extra_tensors: tuple | None = None):
        self.event = event
        self.extra_tensors = extra_tensors
        self.hook_after_wait: Callable[[], Any] | None = None

    def register_hook_after_wait(self, hook: Callable[[], Any]) -> None:
        if self.hook_after_wait is not None:
            raise RuntimeError("EventOverlap already has a hook registered; wait on it first")
        self.hook_after_wait = hook

    def current_stream_wait(self, release_handle: bool = False) -> Any:
        if self.event is not None:
            self.event.current_stream_wait()
        result = None
        hook, self.hook_after_wait = self.hook_after_wait, None  # consumed before it runs
        if hook is not None:
            result = hook()
        if release_handle:
            self.event = None
        self.extra_tensors = None
        return result

    wait = current_stream_wait

    def __call__(self, release_handle: bool = False):
        self._release_on_exit = release_handle
        return self

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.event is not None or self.hook_after_wait is not None:
            self.current_stream_wait(getattr(self, "_release_on_exit", False))
