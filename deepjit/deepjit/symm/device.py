"""``DeviceWindow``: symmetric memory that Ascend kernels read and write across ranks.

Every rank of the group owns ``num_bytes`` of window: ``num_flags`` int32 signal flags, then the data.
A kernel gets every rank's window base as a table (``bases[rank]``, an int64 tensor) with its rank,
the rank count and a wait timeout -- ``kernel_fields()``, the ``symm_*`` fields of its argument struct
-- and reaches peers through ``dj_symm/device.h``: ``remote`` (an address in a peer's window, used by
the ordinary data movers), ``signal_op`` (set / add a peer's flag after the data) and
``signal_wait_until_ge`` (a bounded wait on an own flag; a timeout fails naming rank and flag), and
``signal_wait_until_ge_for`` (the same wait answering whether the flag got there, for callers that
recover from a silent peer themselves: deep_ep's low-latency shrink mode masks it).

Where the memory lives:

- NPU tensors (``npu``; never run in this project's CI): one CANN SHMEM symmetric heap object
  (hicann/shmem, gitcode.com/cann/shmem; include/host/mem/aclshmem_host_heap.h ``aclshmem_calloc`` /
  ``aclshmem_free``, flags zeroed), the table filled with ``aclshmem_ptr(window, pe)`` (host RMA API); the kernels'
  ``dj_symm`` calls are ``aclshmem_ptr`` / ``aclshmemx_signal_op`` / ``aclshmem_signal_wait_until``
  (deepjit/include/dj_symm/device.h). Needs the process to have run ``aclshmemx_init_attr`` with the
  group's ranks (the platform's bootstrap), on a supernode for ranks on several hosts.
- CPU tensors (the Ascend twin): a ``SymmetricWindow`` (one shared-memory segment per rank, mapped
  by every rank of the host), so a twin kernel in one rank's process writes another rank's window for
  real while both run. The twin accesses windows in place and checks every access against the
  windows' data ranges like a tensor argument's (``backends/ascend_twin/windows.py``). Only ranks of one host can share
  it: a group spanning hosts is refused (deep_ep keeps its HCCL path for those).
"""
from __future__ import annotations

import torch

from .. import validation as V
from ..backends.ascend_twin import windows as twin_windows
from .window import SymmetricWindow

FLAG_BYTES = 4
DATA_ALIGN = 512     # the data starts on a 512-byte boundary after the flags (data movers like 32)


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class DeviceWindow:
    """Create with ``DeviceWindow.create(group, num_bytes, num_flags, name_hint, device)`` (collective)."""

    def __init__(self, *args, **kwargs):
        raise TypeError("use DeviceWindow.create(group, num_bytes, num_flags, name_hint, device)")

    @classmethod
    def create(cls, group=None, num_bytes: int = 0, num_flags: int = 64, name_hint: str = "symm",
               device: torch.device | str = "cpu", timeout_s: float | None = None) -> DeviceWindow:
        """``num_bytes`` data bytes and ``num_flags`` flags per rank, every flag 0 at the start.
        ``device``: "cpu" for the twin, an NPU device for CANN SHMEM."""
        import torch.distributed as dist

        for name, value in (("num_bytes", num_bytes), ("num_flags", num_flags)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise V.fail(name, "a non-negative int", repr(value))
        device = torch.device(device)
        if device.type not in ("cpu", "npu"):
            raise V.fail("device", "cpu (the Ascend twin) or npu", device)
        if not dist.is_initialized():
            raise RuntimeError("DeviceWindow.create needs an initialised torch.distributed process group")
        group = group if group is not None else dist.group.WORLD
        self = object.__new__(cls)
        self.name = name_hint
        self.device = device
        self.num_flags = num_flags
        self.data_offset = _round_up(num_flags * FLAG_BYTES, DATA_ALIGN)
        self.num_data_bytes = num_bytes
        self.window_bytes = self.data_offset + num_bytes
        self.rank, self.num_ranks = dist.get_rank(group), dist.get_world_size(group)
        self._npu = None
        self._window = None
        if device.type == "npu":
            # CANN SHMEM numbers PEs over the world it was initialised with, and the kernels address peers
            # by group rank: only a group whose ranks are the world's (in order) maps one onto the other
            if self.num_ranks != dist.get_world_size() or any(                          # pragma: npu
                    dist.get_global_rank(group, r) != r for r in range(self.num_ranks)):
                raise V.fail("group", "the WORLD group for a DeviceWindow on NPU (CANN SHMEM PEs are world "
                             "ranks)", f"a group of {self.num_ranks} of {dist.get_world_size()} ranks")
            self._npu = _NpuHeapObject(self.window_bytes, self.num_ranks)          # pragma: npu
            self.timeout_s = 0.0 if timeout_s is None else float(timeout_s)
            self.bases = torch.tensor(self._npu.peer_addresses(), dtype=torch.int64).to(device)
        else:
            self._window = SymmetricWindow.create(group, self.window_bytes, f"dev_{name_hint}", num_signals=0,
                                                  timeout_s=timeout_s)
            if self._window.num_local_ranks != self.num_ranks:
                ranks = self._window.local_ranks
                self._window.destroy()
                raise V.fail("group", f"ranks all on this host for DeviceWindow {name_hint!r} (the twin's window is "
                             f"host shared memory; use the HCCL transport for groups that span hosts)",
                             f"only group ranks {ranks} of {self.num_ranks} here")
            self.timeout_s = self._window.timeout_s
            self.bases = self._window.data_ptrs()
            self._own_flags().zero_()
            self._window.barrier()
            twin_windows.register(self)
        return self

    # ---- what kernels get ---------------------------------------------------------------------
    def kernel_fields(self) -> dict:
        """The ``symm_*`` fields of a kernel's argument struct (see symm/ascend/kernel_args.h)."""
        return {"symm_bases": self.bases, "symm_bytes": self.window_bytes, "symm_data_offset": self.data_offset,
                "symm_timeout_ns": int(self.timeout_s * 1e9), "symm_rank": self.rank,
                "symm_num_ranks": self.num_ranks}

    def twin_regions(self) -> list[tuple[int, int, str]]:
        """``(address, bytes, name)`` of every rank's window in this process (what the twin checks)."""
        if self._window is None or self._window._destroyed:
            return []
        return [(int(self.bases[r]), self.window_bytes, f"symm window {self.name} of rank {r}")
                for r in range(self.num_ranks)]

    # ---- the transport's kernels ---------------------------------------------------------------
    def put_signal(self, src: torch.Tensor, peer: int, offset: int, flag: int, value: int = 1,
                   num_blocks: int = 1) -> None:
        """A kernel puts ``src``'s bytes at data byte ``offset`` of rank ``peer``'s window, then each of its
        ``num_blocks`` blocks adds ``value`` to the peer's flag ``flag`` (wait for ``value * num_blocks``)."""
        from .kernels import ascend_args, put_signal_kernel

        src = self._bytes("src", src)
        self._check_range("put_signal", peer, offset, src.numel(), flag, num_blocks)
        put_signal_kernel()(num_blocks, ascend_args("DjSymmPutSignalArgs", src=src, **self.kernel_fields(),
                                                    dst_offset=offset, num_bytes=src.numel(), peer=peer, flag=flag,
                                                    value=value, pad=0))

    def wait_get(self, out: torch.Tensor, offset: int, flag: int, value: int, num_blocks: int = 1) -> None:
        """A kernel waits until this rank's flag ``flag`` reaches ``value`` (the window's timeout: a
        ``TwinLaunchError`` naming rank and flag), then copies data bytes ``[offset, offset + out bytes)``
        of this rank's window into ``out``."""
        from .kernels import ascend_args, wait_get_kernel

        raw = self._bytes("out", out)
        self._check_range("wait_get", self.rank, offset, raw.numel(), flag, num_blocks)
        wait_get_kernel()(num_blocks, ascend_args("DjSymmWaitGetArgs", dst=raw, **self.kernel_fields(),
                                                  src_offset=offset, num_bytes=raw.numel(), flag=flag, value=value))

    @staticmethod
    def _bytes(name: str, t: torch.Tensor) -> torch.Tensor:
        if not isinstance(t, torch.Tensor) or not t.is_contiguous() or t.numel() == 0:
            raise V.fail(name, "a non-empty contiguous tensor", type(t).__name__ if not isinstance(t, torch.Tensor)
                         else f"shape {tuple(t.shape)}, strides {t.stride()}")
        return t.view(-1).view(torch.uint8)

    def _check_range(self, op: str, peer: int, offset: int, num_bytes: int, flag: int, num_blocks: int) -> None:
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < self.num_ranks:
            raise V.fail("peer", f"a rank in [0, {self.num_ranks}) for DeviceWindow.{op}", repr(peer))
        if not isinstance(offset, int) or offset < 0 or offset + num_bytes > self.num_data_bytes:
            raise V.fail("offset", f"a byte range inside the window's {self.num_data_bytes} data bytes for "
                         f"DeviceWindow.{op}", f"bytes [{offset}, {offset + num_bytes})")
        if not isinstance(flag, int) or not 0 <= flag < self.num_flags:
            raise V.fail("flag", f"a flag in [0, {self.num_flags}) for DeviceWindow.{op}", repr(flag))
        if not isinstance(num_blocks, int) or num_blocks < 1:
            raise V.fail("num_blocks", f"a positive int for DeviceWindow.{op}", repr(num_blocks))

    # ---- host views (tests, debugging; never on a hot path) -----------------------------------------
    def data(self, rank: int, dtype: torch.dtype, shape, offset: int = 0) -> torch.Tensor:
        """A host view of rank ``rank``'s data at byte ``offset`` (twin windows only)."""
        self._check_twin("data")
        return self._window.tensor(rank, dtype, shape, self.data_offset + offset)

    def flags(self, rank: int) -> torch.Tensor:
        """Rank ``rank``'s flags as an int32 host view (twin windows only)."""
        self._check_twin("flags")
        return self._window.tensor(rank, torch.int32, (self.num_flags,), 0)

    def _own_flags(self) -> torch.Tensor:
        return self._window.tensor(self._window.local_rank, torch.int32, (self.num_flags,), 0)

    def _check_twin(self, what: str):
        if self._window is None:
            raise ValueError(f"DeviceWindow.{what}: host views exist only for twin (CPU) windows")

    def barrier(self) -> None:
        if self._window is not None:
            self._window.barrier()
        else:
            self._npu.barrier()                                                         # pragma: npu

    def destroy(self) -> None:
        twin_windows.unregister(self)
        if self._window is not None:
            self._window.destroy()
        if self._npu is not None:
            self._npu.free()                                                            # pragma: npu
            self._npu = None

    def __repr__(self):
        return (f"DeviceWindow({self.name!r}, rank {self.rank} of {self.num_ranks}, {self.num_flags} flags + "
                f"{self.num_data_bytes} bytes on {self.device})")


class _NpuHeapObject:
    """``npu``: one CANN SHMEM symmetric heap object (hicann/shmem include/host/mem/aclshmem_host_heap.h
    ``void* aclshmem_calloc(size_t nmemb, size_t size)`` (zeroed), ``void aclshmem_free(void*)``, and
    ``aclshmem_barrier_all()``; include/host/data_plane
    ``aclshmem_ptr(void* ptr, int pe)``: ptr's address on pe; include/host/init: the process must have
    been initialised with ``aclshmemx_init_attr``). The library is found as ``libshmem.so`` (ACLSHMEM_HOME/lib)."""

    def __init__(self, num_bytes: int, num_ranks: int):                                # pragma: npu
        import ctypes
        import os

        home = os.environ.get("ACLSHMEM_HOME")
        path = os.path.join(home, "lib", "libshmem.so") if home else "libshmem.so"
        try:
            self._lib = ctypes.CDLL(path)
        except OSError as exc:
            raise RuntimeError(f"DeviceWindow on NPU needs CANN SHMEM (hicann/shmem): cannot load {path}: {exc}; "
                               f"set ACLSHMEM_HOME") from None
        self._lib.aclshmem_calloc.restype = ctypes.c_void_p
        self._lib.aclshmem_calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
        self._lib.aclshmem_ptr.restype = ctypes.c_void_p
        self._lib.aclshmem_ptr.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self._lib.aclshmem_free.argtypes = [ctypes.c_void_p]
        self.ptr = self._lib.aclshmem_calloc(1, num_bytes)   # collective: every PE allocates the same object
        if not self.ptr:
            raise RuntimeError(f"aclshmem_calloc(1, {num_bytes}) failed: the symmetric heap is too small or "
                               f"aclshmem is not initialised")
        self.num_ranks = num_ranks

    def peer_addresses(self) -> list[int]:                                              # pragma: npu
        bases = [self._lib.aclshmem_ptr(self.ptr, pe) for pe in range(self.num_ranks)]
        missing = [pe for pe, b in enumerate(bases) if not b]
        if missing:  # a null base would send the kernels' remote writes to address 0
            raise RuntimeError(f"aclshmem_ptr gave no address for PE(s) {missing}: those ranks' windows are not "
                               f"reachable from this one (use the HCCL transport)")
        return [int(b) for b in bases]

    def barrier(self) -> None:                                                          # pragma: npu
        self._lib.aclshmem_barrier_all()

    def free(self) -> None:                                                             # pragma: npu
        self._lib.aclshmem_free(self.ptr)
