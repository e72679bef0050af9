"""``BufferBase``: the explicit-destroy lifecycle shared by every buffer."""
from __future__ import annotations

from deepjit.symm import reap_orphaned_segments


class BufferBase:
    def __init__(self, explicitly_destroy: bool = False):
        # Shared memory left by buffers whose every rank was killed while building them goes now,
        # whichever transport this buffer uses (the shared-memory windows reap at creation too).
        reap_orphaned_segments()
        self.explicitly_destroy = bool(explicitly_destroy)
        self.main_context = None
        self._destroyed = False

    def destroy(self) -> None:
        """Release the buffer's shared memory and worker. Needs ``explicitly_destroy=True``."""
        if not self.explicitly_destroy:
            raise RuntimeError("destroy() needs a buffer created with explicitly_destroy=True; otherwise the "
                               "destructor releases it")
        self._release()

    def _release(self) -> None:
        self._destroyed = True

    def _check_alive(self) -> None:
        if self._destroyed:
            raise RuntimeError(f"{type(self).__name__} was destroyed; create a new one")

    def print_memory_usage(self) -> None:
        print(f"{type(self).__name__}: {getattr(self, 'num_bytes', 0)} bytes per rank")

    def __del__(self):
        try:
            if not self._destroyed:
                self._release()
        except Exception:
            pass
