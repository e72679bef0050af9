"""Symmetric shared-memory windows: the one cross-process memory service the libraries share.

A window is created collectively over a ``torch.distributed`` group. Every rank on the same host
owns one segment of ``num_bytes`` data bytes and maps all its local peers' segments, so it can
write straight into their memory; signals (monotonic int64 flags) with bounded waits order the
traffic. deep_ep's intra-host transport and deep_gemm's Mega MoE buffer are both built on it::

    from deepjit.symm import SymmetricWindow
    win = SymmetricWindow.create(group, num_bytes=1 << 20, name_hint="ep")
    inbox = win.tensor(peer, torch.bfloat16, (rows, hidden), offset=0)   # a peer's memory
    inbox.copy_(x)                   # write into the peer
    win.notify_lanes(0, seq)          # peer p's slot 0 + my_local_rank := seq
    win.wait_lanes(0, seq)            # wait until every peer has written its lane of slot 0
    win.barrier(); win.destroy()

Failures raise ``PeerTimeoutError``, ``PeerDiedError`` or ``PeerAbortedError`` (``win.abort()``
makes every peer's waits fail at once). The ``/dev/shm`` names exist only during creation; names
left by windows whose every creator was killed mid-build are reaped by the next creation
(``reap_orphaned_segments``).
``DeviceWindow`` (device.py) is the same memory for Ascend kernels: peers' window bases as a table, int32
flags kernels set and wait on (CANN SHMEM's symmetric heap on an NPU, this window on the twin).
``DJ_SYMM_TIMEOUT_S`` sets the default wait timeout; ``DJ_SYMM_HOST_ID`` overrides host identity.
"""
from .device import DeviceWindow
from .errors import PeerAbortedError, PeerDiedError, PeerTimeoutError, SymmetricWindowError
from .window import SymmetricWindow, host_identity, reap_orphaned_segments

__all__ = ["DeviceWindow", "PeerAbortedError", "PeerDiedError", "PeerTimeoutError", "SymmetricWindow", "SymmetricWindowError",
           "host_identity", "reap_orphaned_segments"]
