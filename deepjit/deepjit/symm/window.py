"""``SymmetricWindow``: one shared-memory segment per local rank, mapped by every local rank.

Layout of each rank's segment (all ranks use the same sizes)::

    [header: line 0 magic + pid | line 1 abort word | barrier lanes | user signal slots][data]

Lines are 64 bytes; the data region starts at a page boundary. ``tensor(peer, ...)`` views any
peer's data region, so a rank writes straight into its peers' memory. Signals are monotonically
increasing int64 words: write the data, then ``notify``; the receiver ``wait``s for the value.

Lifetime: the segments are named files in ``/dev/shm`` only while the window is being created;
as soon as every local rank has mapped every segment, each rank unlinks its own, so nothing is
left behind when the processes exit, however they exit. A failure during creation unlinks all of
the window's names on every surviving rank.
"""
from __future__ import annotations

import mmap
import os
import re
import secrets
import socket
import time
from collections.abc import Iterable, Sequence

import torch

from .. import validation as V
from .errors import PeerAbortedError, PeerDiedError, PeerTimeoutError, SymmetricWindowError
from .kernels import entry_points, notify_kernel, wait_kernel

SHM_DIR = "/dev/shm"
LINE = 64
PAGE = 4096
MAGIC = 0x44_4A_53_59_4D_4D_01  # "DJSYMM" v1
_ABORT_LINE = 1
_FIRST_SIGNAL_LINE = 2
DEFAULT_TIMEOUT_S = 300.0

_WINDOW_COUNTER = 0


def host_identity() -> str:
    """Which host this process runs on: ``DJ_SYMM_HOST_ID`` if set (tests use it to simulate
    several hosts on one machine), else host name plus kernel boot id."""
    forced = os.environ.get("DJ_SYMM_HOST_ID")
    if forced:
        return forced
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def default_timeout_s() -> float:
    raw = os.environ.get("DJ_SYMM_TIMEOUT_S")
    return float(raw) if raw else DEFAULT_TIMEOUT_S


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


_MADV_POPULATE_WRITE = 23  # Linux 5.14+; older kernels fault the pages in on first touch instead


def _prefault(mapping: mmap.mmap, start: int, length: int) -> None:
    if length > 0:
        try:
            mapping.madvise(_MADV_POPULATE_WRITE, start, length)
        except OSError:
            pass


_SEGMENT_NAME = re.compile(r"(?P<window>dj-symm-\w{0,32}-(?P<ns>\d+)-(?P<pid>\d+)-[0-9a-f]+-\d+)-\d+")


def _pid_namespace() -> int:
    """This process's pid namespace (its inode): pids in a segment name mean something only there."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _creator_pid(path: str) -> int | None:
    """The pid in a segment's header (written once its creator has mapped it), if there is one."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return None
    if len(head) < 16 or int.from_bytes(head[:8], "little") != MAGIC:
        return None
    return int.from_bytes(head[8:16], "little")


def reap_orphaned_segments(shm_dir: str = SHM_DIR) -> list[str]:
    """Unlinks the ``/dev/shm`` names of windows whose creators have all exited: the names live
    only while a window is being built, so they are left only when every rank building it was
    killed (SIGKILL, or a signal with no handler). A window is kept while any of its creators (the
    leader in its name, each segment's owner in its header) is alive, or when its names come from
    another pid namespace (whose pids this process cannot judge). Returns the names removed."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    here = str(_pid_namespace())
    windows: dict[str, list[str]] = {}
    for name in names:
        m = _SEGMENT_NAME.fullmatch(name)
        if m is not None and m["ns"] == here:
            windows.setdefault(m["window"], []).append(name)
    removed = []
    for members in windows.values():
        pids = {int(_SEGMENT_NAME.fullmatch(members[0])["pid"])}
        pids.update(p for p in (_creator_pid(os.path.join(shm_dir, n)) for n in members) if p is not None)
        if any(_alive(p) for p in pids):
            continue
        for name in members:
            try:
                os.unlink(os.path.join(shm_dir, name))
                removed.append(name)
            except OSError:
                pass
    return removed


def _open_pidfd(pid: int) -> int:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1  # no pidfd support: dead peers are then caught by the timeout


class SymmetricWindow:
    """Create with ``SymmetricWindow.create(group, num_bytes, name_hint)`` (collective over ``group``).

    Peers are addressed by local index ``0..num_local_ranks-1``; ``local_ranks[i]`` is the group
    rank of local peer ``i``. Only ranks on the same host share a window: in a group spanning
    several hosts each host gets its own window, created by the same collective call.
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("use SymmetricWindow.create(group, num_bytes, name_hint)")

    # ---- creation -----------------------------------------------------------------------------
    @classmethod
    def create(cls, group=None, num_bytes: int = 0, name_hint: str = "symm", num_signals: int = 256,
               timeout_s: float | None = None, reserve_bytes: int | None = None,
               prefault: bool = True) -> SymmetricWindow:
        """``reserve_bytes``: how many data bytes (from the start) are given memory now (default:
        all); the rest is address space until ``commit`` gives it memory. ``prefault``: map the
        memory in now (a first touch costs a page fault; on a virtual machine the first touch of a
        page can cost far more than its copy) or on first use (a fast construction)."""
        import torch.distributed as dist

        if isinstance(num_bytes, bool) or not isinstance(num_bytes, int) or num_bytes < 0:
            raise V.fail("num_bytes", "a non-negative int", repr(num_bytes))
        if isinstance(num_signals, bool) or not isinstance(num_signals, int) or num_signals < 0:
            raise V.fail("num_signals", "a non-negative int", repr(num_signals))
        reserve_bytes = num_bytes if reserve_bytes is None else reserve_bytes
        if isinstance(reserve_bytes, bool) or not isinstance(reserve_bytes, int) or not 0 <= reserve_bytes:
            raise V.fail("reserve_bytes", "a non-negative int", repr(reserve_bytes))
        if not dist.is_initialized():
            raise RuntimeError("SymmetricWindow.create needs an initialised torch.distributed process group")
        group = group if group is not None else dist.group.WORLD
        timeout_s = default_timeout_s() if timeout_s is None else float(timeout_s)
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        global _WINDOW_COUNTER
        _WINDOW_COUNTER += 1
        me = (host_identity(), os.getpid(), secrets.token_hex(6), num_bytes, num_signals, _WINDOW_COUNTER)
        infos: list = [None] * world
        dist.all_gather_object(infos, me, group=group)
        local_ranks = [r for r in range(world) if infos[r][0] == me[0]]
        for r in local_ranks:
            if infos[r][3:5] != (num_bytes, num_signals):
                raise V.fail("num_bytes", "the same num_bytes and num_signals on every local rank",
                             f"rank {rank} has ({num_bytes}, {num_signals}), rank {r} has {infos[r][3:5]}")
        leader = infos[local_ranks[0]]
        hint = re.sub(r"[^A-Za-z0-9_]", "_", name_hint)[:32]
        token = f"dj-symm-{hint}-{_pid_namespace()}-{leader[1]}-{leader[2]}-{leader[5]}"
        reap_orphaned_segments()
        self = object.__new__(cls)
        self._init(group, rank, local_ranks, [infos[r][1] for r in local_ranks], token, num_bytes, num_signals,
                   timeout_s, min(reserve_bytes, num_bytes), bool(prefault))
        return self

    def _init(self, group, rank, local_ranks, pids, token, num_bytes, num_signals, timeout_s, reserve_bytes,
              prefault):
        self.group = group
        self.rank = rank
        self.local_ranks = list(local_ranks)
        self.local_rank = self.local_ranks.index(rank)
        self.num_local_ranks = len(local_ranks)
        self.num_bytes = num_bytes
        self.num_signals = num_signals
        self.timeout_s = timeout_s
        self.pids = list(pids)
        self.header_bytes = _round_up((_FIRST_SIGNAL_LINE + self.num_local_ranks + num_signals) * LINE, PAGE)
        self.segment_bytes = self.header_bytes + _round_up(max(num_bytes, 1), PAGE)
        self.committed_bytes = min(self.segment_bytes, self.header_bytes + _round_up(reserve_bytes, PAGE))
        self.prefault = prefault
        self._own_fd = -1   # kept open while the rest of the segment may still be committed
        self._committed_extra: list[tuple[int, int]] = []   # segment ranges committed since
        self._paths = [os.path.join(SHM_DIR, f"{token}-{i}") for i in range(self.num_local_ranks)]
        self._maps: list[mmap.mmap | None] = [None] * self.num_local_ranks
        self._bases: list[torch.Tensor | None] = [None] * self.num_local_ranks
        self._pidfds = torch.full((self.num_local_ranks,), -1, dtype=torch.int32)
        self._status = torch.zeros(3, dtype=torch.int64)
        self._address_memo: dict = {}
        self._barrier_epoch = 0
        self._destroyed = False
        self.failed: BaseException | None = None
        try:
            for i, pid in enumerate(self.pids):
                if i != self.local_rank:
                    self._pidfds[i] = _open_pidfd(pid)
            self._map_own_segment()
            self._map_peer_segments()
            self.barrier()  # every local rank has mapped every segment ...
            os.unlink(self._paths[self.local_rank])  # ... so the names can go now
        except BaseException:
            self._unlink_all()
            self._close()
            raise

    def _map_own_segment(self):
        fd = os.open(self._paths[self.local_rank], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            self._reserve(fd)
            self._attach(self.local_rank, fd)
        except BaseException:
            os.close(fd)
            raise
        if self.committed_bytes < self.segment_bytes:
            self._own_fd = fd
        else:
            os.close(fd)
        header = self._bases[self.local_rank][:16].view(torch.int64)
        header[1] = os.getpid()
        header[0] = MAGIC

    def _reserve(self, fd: int):
        """Allocates every page of the committed part now, then gives the segment its full size
        (peers wait for that size): a size set by ftruncate alone is a promise tmpfs breaks with
        SIGBUS at the first touch beyond its room, so the rest is touched only after ``commit``."""
        try:
            os.posix_fallocate(fd, 0, self.committed_bytes)
            if self.committed_bytes < self.segment_bytes:
                os.ftruncate(fd, self.segment_bytes)
        except OSError as exc:
            try:
                st = os.statvfs(os.path.dirname(self._paths[self.local_rank]))
                free = f"{st.f_bavail * st.f_frsize} bytes free"
            except OSError:
                free = "free space unknown"
            raise SymmetricWindowError(
                f"SymmetricWindow: cannot reserve {self.segment_bytes} bytes of shared memory for local rank "
                f"{self.local_rank} ({self.num_local_ranks} local ranks need {self.num_local_ranks * self.segment_bytes} "
                f"in all) on {SHM_DIR}: {exc.strerror}, {free}. Enlarge the mount (docker: --shm-size) or "
                f"ask for smaller buffers") from None

    def _map_peer_segments(self):
        deadline = time.monotonic() + self.timeout_s
        pending = [i for i in range(self.num_local_ranks) if i != self.local_rank]
        while pending:
            for i in list(pending):
                try:
                    fd = os.open(self._paths[i], os.O_RDWR)
                except FileNotFoundError:
                    continue
                try:
                    if os.fstat(fd).st_size != self.segment_bytes:
                        continue  # created but not sized yet
                    self._attach(i, fd)
                    pending.remove(i)
                finally:
                    os.close(fd)
            if not pending:
                break
            self._check_peers_alive(pending)
            if time.monotonic() > deadline:
                raise PeerTimeoutError(f"SymmetricWindow: local ranks {pending} (group ranks "
                                       f"{[self.local_ranks[i] for i in pending]}) did not create their segment "
                                       f"within {self.timeout_s:.0f} s")
            time.sleep(0.001)

    def _attach(self, i: int, fd: int):
        whole = self.committed_bytes == self.segment_bytes
        # Prefaulting a range with no memory behind it yet would allocate it: only the committed part.
        flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if whole and self.prefault else 0)
        self._maps[i] = mmap.mmap(fd, self.segment_bytes, flags=flags)
        self._bases[i] = torch.frombuffer(self._maps[i], dtype=torch.uint8)
        if not whole and self.prefault:
            _prefault(self._maps[i], 0, self.committed_bytes)

    def commit(self, offset: int, num_bytes: int) -> bool:
        """Gives this rank's data bytes ``[offset, offset + num_bytes)`` memory (a no-op for what
        already has it); False, with nothing changed, when the shared-memory mount has no room for
        them. Peers fault the new pages in on their first touch."""
        self._check_usable()
        start = self.header_bytes + offset // PAGE * PAGE
        end = min(self.segment_bytes, self.header_bytes + _round_up(offset + num_bytes, PAGE))
        if end <= self.committed_bytes or any(a <= start and end <= b for a, b in self._committed_extra):
            return True
        start = max(start, self.committed_bytes)
        try:
            os.posix_fallocate(self._own_fd, start, end - start)
        except OSError:
            return False
        if self.prefault:
            _prefault(self._maps[self.local_rank], start, end - start)
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*self._committed_extra, (start, end)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        self._committed_extra = merged   # at most one entry per uncommitted gap: bounded
        return True

    def _check_peers_alive(self, peers: Iterable[int]):
        for i in peers:
            fd = int(self._pidfds[i])
            if fd >= 0:
                import select
                readable, _, _ = select.select([fd], [], [], 0)
                if readable:
                    raise PeerDiedError(f"SymmetricWindow: local rank {i} (group rank {self.local_ranks[i]}, "
                                        f"pid {self.pids[i]}) exited")

    def _unlink_all(self):
        for path in self._paths:
            try:
                os.unlink(path)
            except OSError:
                pass

    # ---- memory -------------------------------------------------------------------------------
    def _check_usable(self):
        if self._destroyed:
            raise SymmetricWindowError("SymmetricWindow was destroyed")

    def _check_peer(self, peer: int):
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < self.num_local_ranks:
            raise V.fail("peer", f"a local rank index in [0, {self.num_local_ranks})", repr(peer))

    def tensor(self, peer: int, dtype: torch.dtype, shape: Sequence[int], offset: int = 0) -> torch.Tensor:
        """A view of ``shape``/``dtype`` at byte ``offset`` of local peer ``peer``'s data region."""
        self._check_usable()
        self._check_peer(peer)
        shape = tuple(int(s) for s in shape)
        itemsize = dtype.itemsize
        numel = 1
        for s in shape:
            if s < 0:
                raise V.fail("shape", "non-negative sizes", shape)
            numel *= s
        if offset < 0 or offset % itemsize:
            raise V.fail("offset", f"a non-negative multiple of {itemsize} for {dtype}", offset)
        if offset + numel * itemsize > self.num_bytes:
            raise V.fail("shape", f"a view inside the window's {self.num_bytes} data bytes from offset {offset}",
                         f"{numel * itemsize} bytes")
        start = self.header_bytes + offset
        return self._bases[peer][start:start + numel * itemsize].view(dtype).view(shape)

    def own_tensor(self, offset: int, num_bytes: int) -> torch.Tensor:
        """A uint8 view of this rank's data bytes ``[offset, offset + num_bytes)`` with a storage of
        its own, so ``torch``'s storage reference count tells whether any view of it is still held
        (used to hand out window memory as operation outputs and reuse it once released)."""
        self._check_usable()
        if offset < 0 or num_bytes < 0 or offset + num_bytes > self.num_bytes:
            raise V.fail("offset", f"a range inside the window's {self.num_bytes} data bytes", f"[{offset}, {offset + num_bytes})")
        # Through a memoryview, which the tensor's storage keeps alive: the export it holds keeps the
        # mapping in place after destroy() while a caller still uses the view (frombuffer on the mmap
        # itself holds no export, so destroy() would unmap memory a caller still reads).
        return torch.frombuffer(memoryview(self._maps[self.local_rank]), dtype=torch.uint8, count=num_bytes,
                                offset=self.header_bytes + offset)

    def data_ptr(self, peer: int) -> int:
        """Address of local peer ``peer``'s data region in this process (for host kernels)."""
        self._check_usable()
        self._check_peer(peer)
        return self._bases[peer].data_ptr() + self.header_bytes

    def data_ptrs(self) -> torch.Tensor:
        """Every local peer's data address as an int64 tensor (a host kernel argument)."""
        return torch.tensor([self.data_ptr(i) for i in range(self.num_local_ranks)], dtype=torch.int64)

    # ---- signals ------------------------------------------------------------------------------
    def _line_address(self, peer: int, line: int) -> int:
        return self._bases[peer].data_ptr() + line * LINE

    def signal_address(self, peer: int, slot: int) -> int:
        self._check_peer(peer)
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < self.num_signals:
            raise V.fail("slot", f"a signal slot in [0, {self.num_signals})", repr(slot))
        return self._line_address(peer, _FIRST_SIGNAL_LINE + self.num_local_ranks + slot)

    def _addresses(self, key, make) -> torch.Tensor:
        found = self._address_memo.get(key)
        if found is None:
            found = torch.tensor(make(), dtype=torch.int64)
            self._address_memo[key] = found
        return found

    def notify(self, slot: int, value: int, peers: Sequence[int] | None = None) -> None:
        """Release-store ``value`` into signal ``slot`` of every peer in ``peers`` (default all)."""
        self._check_usable()
        peers = tuple(range(self.num_local_ranks)) if peers is None else tuple(peers)
        addresses = self._addresses(("n", slot, peers), lambda: [self.signal_address(p, slot) for p in peers])
        notify_kernel()(addresses, len(peers), int(value))

    def notify_lanes(self, base_slot: int, value: int) -> None:
        """The per-sender lane pattern: write ``value`` into slot ``base_slot + local_rank`` of every peer."""
        self._check_usable()
        slot = base_slot + self.local_rank
        peers = tuple(range(self.num_local_ranks))
        addresses = self._addresses(("n", slot, peers), lambda: [self.signal_address(p, slot) for p in peers])
        notify_kernel()(addresses, len(peers), int(value))

    def wait(self, slots: Iterable[int], value: int, timeout_s: float | None = None, what: str = "signal") -> None:
        """Wait until this rank's own signal ``slots`` all hold at least ``value``.

        Raises ``PeerTimeoutError`` after the timeout, ``PeerDiedError`` when a local peer process
        has exited and ``PeerAbortedError`` when a peer called ``abort()``; each names the peer."""
        self._check_usable()
        slots = tuple(slots)
        addresses = self._addresses(("w", slots), lambda: [self.signal_address(self.local_rank, s) for s in slots])
        self._wait(addresses, value, timeout_s, what, lambda i: f"signal slot {slots[i]}")

    def wait_lanes(self, base_slot: int, value: int, timeout_s: float | None = None, what: str = "signal") -> None:
        """Wait until every local peer has written at least ``value`` into its lane ``base_slot + peer``."""
        self._check_usable()
        slots = tuple(range(base_slot, base_slot + self.num_local_ranks))
        addresses = self._addresses(("w", slots), lambda: [self.signal_address(self.local_rank, s) for s in slots])
        self._wait(addresses, value, timeout_s, what,
                   lambda i: f"lane {slots[i]} written by local rank {i} (group rank {self.local_ranks[i]})")

    def _wait(self, addresses, value, timeout_s, what, describe):
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        status = self._status
        wait_kernel()(addresses, addresses.numel(), int(value), self._line_address(self.local_rank, _ABORT_LINE),
                      self._pidfds, self.num_local_ranks, int(timeout_s * 1e9), status)
        self._raise_status(status, value, timeout_s, what, describe)

    def _raise_status(self, status, value, timeout_s, what, describe):
        code, index, seen = (int(v) for v in status.tolist())
        if code == 0:
            return
        if code == 2:
            peer = seen - 1
            err = PeerAbortedError(f"{what}: local rank {peer} (group rank {self.local_ranks[peer]}) aborted the "
                                   f"shared-memory window")
        elif code == 3:
            err = PeerDiedError(f"{what}: local rank {index} (group rank {self.local_ranks[index]}, pid "
                                f"{self.pids[index]}) exited while this rank waited on it")
        else:
            err = PeerTimeoutError(f"{what}: timed out after {timeout_s:.1f} s waiting for {describe(index)} "
                                   f"to reach {value} (saw {seen})")
        self.failed = err
        raise err

    # ---- signalling from inside host kernels ---------------------------------------------------
    def kernel_lanes(self, base_slot: int) -> tuple[torch.Tensor, torch.Tensor]:
        """For a host kernel that notifies and waits itself: the addresses ``notify_lanes`` writes
        (slot ``base_slot + local_rank`` of every peer) and those ``wait_lanes`` watches."""
        self._check_usable()
        me, peers = self.local_rank, tuple(range(self.num_local_ranks))
        slots = tuple(range(base_slot, base_slot + self.num_local_ranks))
        notify = self._addresses(("n", base_slot + me, peers),
                                 lambda: [self.signal_address(p, base_slot + me) for p in peers])
        wait = self._addresses(("w", slots), lambda: [self.signal_address(me, s) for s in slots])
        return notify, wait

    def kernel_wait_context(self) -> tuple[int, int, int, torch.Tensor]:
        """``(notify_fn, wait_fn, abort_word, pidfds)``: what a host kernel passes to the window's
        own notify/wait functions (``deepjit.symm.kernels.entry_points``), with ``timeout_s``."""
        self._check_usable()
        notify_fn, wait_fn = entry_points()
        return notify_fn, wait_fn, self._line_address(self.local_rank, _ABORT_LINE), self._pidfds

    def raise_wait_status(self, status: torch.Tensor, value: int, what: str) -> None:
        """Raise what ``wait_lanes`` would for a kernel's wait ``status`` (int64 [3]); no-op when 0."""
        self._raise_status(status, value, self.timeout_s, what,
                           lambda i: f"lane written by local rank {i} (group rank {self.local_ranks[i]})")

    def barrier(self, timeout_s: float | None = None) -> None:
        """All local ranks meet; bounded like ``wait``."""
        self._check_usable()
        self._barrier_epoch += 1
        me = self.local_rank
        lanes = self._addresses(("b",), lambda: [self._line_address(p, _FIRST_SIGNAL_LINE + me)
                                                 for p in range(self.num_local_ranks)])
        notify_kernel()(lanes, self.num_local_ranks, self._barrier_epoch)
        own = self._addresses(("bw",), lambda: [self._line_address(me, _FIRST_SIGNAL_LINE + p)
                                                for p in range(self.num_local_ranks)])
        self._wait(own, self._barrier_epoch, timeout_s, "SymmetricWindow.barrier",
                   lambda i: f"the barrier arrival of local rank {i} (group rank {self.local_ranks[i]})")

    def abort(self) -> None:
        """Make every local peer's current and future waits fail with ``PeerAbortedError``."""
        if self._destroyed:
            return
        words = [self._line_address(p, _ABORT_LINE) for p in range(self.num_local_ranks) if p != self.local_rank]
        if words:
            notify_kernel()(torch.tensor(words, dtype=torch.int64), len(words), self.local_rank + 1)

    # ---- teardown -----------------------------------------------------------------------------
    def destroy(self) -> None:
        """Unmap every segment (memory is freed when the last rank unmaps or exits). Not collective."""
        if self._destroyed:
            return
        self._destroyed = True
        self._close()

    def _close(self):
        self._bases = [None] * len(self._bases)
        self._address_memo.clear()
        for i, m in enumerate(self._maps):
            if m is not None:
                try:
                    m.close()
                except BufferError:
                    pass  # a caller still holds a view; the mapping goes when that view is freed
                self._maps[i] = None
        for fd in self._pidfds.tolist():
            if fd >= 0:
                os.close(fd)
        self._pidfds.fill_(-1)
        if self._own_fd >= 0:
            os.close(self._own_fd)
            self._own_fd = -1

    def __del__(self):
        try:
            self.destroy()
        except Exception:
            pass

    def __repr__(self):
        return (f"SymmetricWindow(local rank {getattr(self, 'local_rank', '?')} of "
                f"{getattr(self, 'num_local_ranks', '?')}, {getattr(self, 'num_bytes', '?')} bytes)")
