"""Multi-root disk cache with atomic publication (spec: deepjit §8).

Entries live in ``<root>/cache/<tag>.<digest>/`` and are valid only with a ``.committed`` marker.
Builds happen in ``<roots[0]>/tmp/<uuid>/`` and are published by one ``rename``; only the first
root is ever written, later roots may be read-only.

Loading a cached shared object runs its code, so every directory and file an entry is loaded
from must be writable by nobody but the current user (or root), unless the user opts in with
``<PREFIX>_JIT_TRUST_SHARED_CACHE=1`` for a deliberately shared group cache; a root's ancestors
must not be world-writable without the sticky bit (anyone could swap the root for another).

``meta.json`` records the SHA-256 of every artifact (``artifact_sha256``); the runtime checks them
before loading a hit and rebuilds an entry that fails (``verify`` / ``set_aside``). Build dirs of
dead processes and set-aside entries older than ``STALE_SECONDS`` are removed on the first miss.

A miss takes an advisory lock, ``<roots[0]>/locks/<tag>.<digest>``, for the build, so processes (the
ranks of one job, test workers) missing on the same entry build it once: the others wait, then find
the published entry. The lock only saves work: it dies with its holder, a waiter gives up after
``BUILD_WAIT_SECONDS`` and builds too (the atomic publication keeps either result correct). The holder
records its pid in the lock file, so a waiter also gives up as soon as the holder is seen stopped
(SIGSTOP, a debugger) or gone for ``HOLDER_GRACE_SECONDS``.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import random
import re
import socket
import stat
import threading
import time
from collections.abc import Sequence

from .env import Env
from .errors import CacheSecurityError, DeepJITError

COMMITTED = ".committed"
META = "meta.json"
DIGESTS_KEY = "artifact_sha256"
STALE_SECONDS = 60
BUILD_WAIT_SECONDS = 300
HOLDER_GRACE_SECONDS = 1.0
_TAG_RE = re.compile(r"[A-Za-z0-9_]+\Z")
_DIR_MODE, _FILE_MODE = 0o755, 0o644
_rng = threading.local()


def make_uuid() -> str:
    """``<pid>-<8hex>-<8hex>-<8hex>`` from a per-thread generator (re-seeded after fork)."""
    gen = getattr(_rng, "gen", None)
    if gen is None or getattr(_rng, "pid", None) != os.getpid():
        gen = _rng.gen = random.Random(int.from_bytes(os.urandom(8), "little") ^ threading.get_ident())
        _rng.pid = os.getpid()
    return f"{os.getpid()}-" + "-".join(f"{gen.getrandbits(32):08x}" for _ in range(3))


def makedirs(path: str) -> None:
    """``os.makedirs`` with owner-only write access whatever the umask (see the trust check)."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        makedirs(parent)
    try:
        os.mkdir(path, _DIR_MODE)
    except FileExistsError:
        return
    os.chmod(path, _DIR_MODE)  # mkdir's mode is masked by the umask; a group-writable umask would fail the check


def write_file_sync(path: str, data) -> None:
    """write, flush, fsync, close; the file is created owner-writable only."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
    with open(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str) -> None:
    """fsync every regular file, then each directory bottom-up; tightens modes on the way.

    Compilers create their outputs with the umask's mode; the trust check would reject a
    group-writable output, so files become 0644 and directories 0755 before publication."""
    for dirpath, _, filenames in os.walk(path, topdown=False):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                continue
            os.chmod(full, os.stat(full).st_mode & ~0o022)
            fd = os.open(full, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.chmod(dirpath, _DIR_MODE)
        fsync_dir(dirpath)


def safe_remove_all(path: str) -> None:
    """Recursive delete that unlinks symlinks instead of following them."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        for name in os.listdir(path):
            safe_remove_all(os.path.join(path, name))
        os.rmdir(path)
    else:
        os.unlink(path)


def untrusted_reason(path: str) -> str | None:
    """Why another user could change ``path`` (owner or group/other write bit), or None."""
    uid = os.getuid()
    for st in (os.lstat(path), os.stat(path)):
        if st.st_uid not in (uid, 0):
            return f"owned by uid {st.st_uid}"
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"writable by group or others (mode {oct(st.st_mode & 0o7777)})"
    return None


def unsafe_ancestor(path: str) -> str | None:
    """The first ancestor of ``path`` that is world-writable without the sticky bit, or None."""
    parent = os.path.dirname(path)
    while parent and parent != path:
        try:
            mode = os.stat(parent).st_mode
        except FileNotFoundError:
            mode = 0
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
            return parent
        path, parent = parent, os.path.dirname(parent)
    return None


def artifact_digests(path: str) -> dict[str, str]:
    """SHA-256 of every regular file under ``path`` (relative names, sorted), except the metadata and marker."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, path)
            if rel in (META, COMMITTED) or os.path.islink(full):
                continue
            with open(full, "rb") as f:
                out[rel] = hashlib.file_digest(f, "sha256").hexdigest()
    return out


def verify(path: str) -> str | None:
    """Why the entry at ``path`` cannot be trusted to load (missing/unreadable metadata, no digests,
    a missing, extra or changed artifact), or None when every artifact matches its digest."""
    try:
        with open(os.path.join(path, META), "rb") as f:
            recorded = json.loads(f.read()).get(DIGESTS_KEY)
    except (OSError, ValueError, AttributeError) as exc:
        return f"has no readable {META} ({exc})"
    if not isinstance(recorded, dict):
        return f"has no artifact digests in {META} (built before they were recorded)"
    try:
        actual = artifact_digests(path)
    except OSError as exc:
        return f"cannot be read ({exc})"
    for name in sorted(set(recorded) | set(actual)):
        if recorded.get(name) != actual.get(name):
            what = "is missing" if name not in actual else "is not in the digests" if name not in recorded \
                else "does not match its SHA-256"
            return f"artifact {name} {what}"
    return None


def _is_stale(path: str, name: str, now: float) -> bool:
    """A set-aside entry past the age limit, or a build dir whose process is gone and which has not
    changed within the limit (the pid prefix of its uuid names the builder)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if now - st.st_mtime < STALE_SECONDS:
        return False
    if "." in name:  # <uuid>.broken / <uuid>.corrupt: set aside, nobody builds there
        return True
    pid = name.split("-", 1)[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _host_id() -> str:
    """This host and pid namespace: a recorded pid means something only to a process sharing both."""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = "-"
    return f"{socket.gethostname()}/{ns}".replace(" ", "_")


def _process_state(pid: int) -> str | None:
    """The kernel's one-letter state of ``pid`` (``R``, ``S``, ``T``...), None when no such process, ``?``
    when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None
    except (OSError, IndexError):
        pass
    try:  # no procfs: liveness only
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        pass
    return "?"


def _holder_stuck(record: bytes) -> bool:
    """Whether the lock holder named by ``record`` (``"<pid> <host id>"``) cannot finish its build soon:
    no such process, a zombie, or stopped. A record from another host or pid namespace, or none, says
    nothing: the waiter keeps waiting."""
    parts = record.decode("ascii", "replace").split()
    if len(parts) != 2 or not parts[0].isdigit() or parts[1] != _host_id():
        return False
    state = _process_state(int(parts[0]))
    return state is None or state in "TtZX"


class BuildLock:
    """An exclusive ``flock`` on ``path``, waited for at most ``wait_s``; ``held`` is False when it could
    not be taken (no lock file, the wait ran out, or the holder stopped or died): the caller then builds
    without it. The holder writes its pid into the file (where it may write) for waiters to check."""

    def __init__(self, path: str, wait_s: float | None = None):
        wait_s = BUILD_WAIT_SECONDS if wait_s is None else wait_s
        self.fd = None
        self.writable = True
        try:
            makedirs(os.path.dirname(path))
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, _FILE_MODE)
            except PermissionError:
                # read-only is enough for flock (another user's lock file in a shared cache), not to record a pid
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                self.writable = False
        except OSError:
            return
        deadline = time.monotonic() + wait_s
        stuck_since = None
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    self.fd, fd = fd, None
                    self._record(f"{os.getpid()} {_host_id()}\n".encode())
                    return
                except BlockingIOError:
                    now = time.monotonic()
                    if now >= deadline:
                        return
                    # one stuck reading could be a new holder that has not yet replaced a dead one's record
                    if not _holder_stuck(os.pread(fd, 256, 0)):
                        stuck_since = None
                    elif stuck_since is None:
                        stuck_since = now
                    elif now - stuck_since >= HOLDER_GRACE_SECONDS:
                        return
                    time.sleep(0.05)
                except OSError:
                    return
        finally:
            if fd is not None:  # not taken (or interrupted while waiting)
                os.close(fd)

    def _record(self, data: bytes) -> None:
        if not self.writable:
            return
        try:
            os.ftruncate(self.fd, 0)
            if data:
                os.pwrite(self.fd, data, 0)
        except OSError:
            pass  # the record only speeds up waiters

    @property
    def held(self) -> bool:
        return self.fd is not None

    def release(self) -> None:
        if self.fd is not None:
            self._record(b"")
            # unlock first: a child forked during the build shares the open file description (and its lock)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


class CacheEntry:
    """A hit (``path`` is the published dir) or a build (fill ``tmp_path``, then ``commit``)."""

    def __init__(self, root: str, final_path: str, tmp_path: str | None, lock: BuildLock | None = None):
        self.root = root
        self.final_path = final_path
        self.tmp_path = tmp_path
        self.committed = tmp_path is None
        self.lock = lock  # released once the build is published or abandoned

    @property
    def is_hit(self) -> bool:
        return self.tmp_path is None

    @property
    def path(self) -> str:
        return self.final_path if self.committed else self.tmp_path

    def _publish(self) -> bool:
        """One atomic rename; False when the final dir already exists (rename onto a non-empty dir fails)."""
        try:
            os.rename(self.tmp_path, self.final_path)
            return True
        except OSError:
            if not os.path.isdir(self.final_path):
                raise
            return False

    def commit(self) -> str:
        if self.committed:
            return self.final_path
        write_file_sync(os.path.join(self.tmp_path, COMMITTED), b"")
        fsync_tree(self.tmp_path)
        parent = os.path.dirname(self.final_path)
        makedirs(parent)
        published = self._publish()
        if not published and not os.path.exists(os.path.join(self.final_path, COMMITTED)):
            # A directory without the marker is debris (publication renames complete trees only):
            # move it aside atomically and try once more.
            aside = os.path.join(self.root, "tmp", make_uuid() + ".broken")
            try:
                os.rename(self.final_path, aside)
            except OSError:
                pass
            else:
                safe_remove_all(aside)
            published = self._publish()
        if published:
            fsync_dir(parent)
        elif os.path.exists(os.path.join(self.final_path, COMMITTED)):
            safe_remove_all(self.tmp_path)  # another writer won: adopt its entry
        else:
            raise DeepJITError(f"failed to publish cache entry {self.final_path}: the path exists and is not a "
                               f"committed entry")
        self.tmp_path = None
        self.committed = True
        self._unlock()
        return self.final_path

    def abandon(self) -> None:
        if not self.committed and self.tmp_path is not None:
            safe_remove_all(self.tmp_path)
            self.tmp_path = None
        self._unlock()

    def _unlock(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __del__(self):
        try:
            self.abandon()
        except Exception:
            pass


class DiskCache:
    def __init__(self, roots: Sequence[str], trust_shared: bool = False, trust_hint: str = "DJ_JIT_TRUST_SHARED_CACHE",
                 dir_hint: str = "DJ_JIT_CACHE_DIR"):
        roots = [os.fspath(r) for r in roots]
        if not roots:
            raise DeepJITError("disk cache path list must not be empty")
        for r in roots:
            if not r:
                raise DeepJITError("disk cache path list contains an empty path")
        self.roots = [os.path.abspath(r) for r in roots]
        self.trust_shared = trust_shared
        self.trust_hint = trust_hint
        self.dir_hint = dir_hint
        self._reaped = False

    @classmethod
    def from_env(cls, env: Env) -> DiskCache:
        trust = env.get_bool("JIT_TRUST_SHARED_CACHE", False)
        hint = f"{env.prefix}_JIT_TRUST_SHARED_CACHE=1 (or DJ_JIT_TRUST_SHARED_CACHE=1)"
        dir_hint = f"{env.prefix}_JIT_CACHE_DIR (or DJ_JIT_CACHE_DIR)"
        raw = env.get_str("JIT_CACHE_DIR")
        if raw is None:
            home = os.environ.get("HOME", "")
            if not home:
                raise DeepJITError(f"{env.prefix}_JIT_CACHE_DIR / DJ_JIT_CACHE_DIR is not set and HOME is empty")
            return cls([os.path.join(home, ".dj")], trust, hint, dir_hint)
        return cls(raw.split(":"), trust, hint, dir_hint)

    @staticmethod
    def check_tag(tag: str) -> None:
        if not isinstance(tag, str) or not _TAG_RE.match(tag):
            raise DeepJITError(f"cache tag must contain only letters, digits, or underscores: {tag!r}")

    def check_trusted(self, dirs: Sequence[str], entry: str | None = None) -> None:
        """Refuses ``dirs`` and everything inside ``entry`` if another user could write to them."""
        if self.trust_shared:
            return
        for root in self.roots:
            if any(d == root or d.startswith(root + os.sep) for d in dirs) and (parent := unsafe_ancestor(root)):
                raise CacheSecurityError(
                    f"refusing JIT cache path {root}: its ancestor {parent} is writable by everyone and not sticky "
                    f"(mode {oct(os.stat(parent).st_mode & 0o7777)}), so another user could replace the cache. Move "
                    f"the cache ({self.dir_hint}), fix the permissions, or set {self.trust_hint}")
        todo = list(dirs) + ([entry] if entry else [])
        while todo:
            path = todo.pop()
            try:
                reason = untrusted_reason(path)
            except FileNotFoundError:
                continue
            if reason is not None:
                raise CacheSecurityError(
                    f"refusing JIT cache path {path}: {reason}; another user could plant code that this process "
                    f"would load and run. Fix its ownership/permissions, or set {self.trust_hint} for a "
                    f"deliberately shared cache")
            if entry and (path == entry or path.startswith(entry + os.sep)) and os.path.isdir(path) \
                    and not os.path.islink(path):
                todo.extend(os.path.join(path, n) for n in os.listdir(path))

    def check_root_is_a_dir(self, root: str) -> None:
        """``root`` and its nearest existing ancestor are directories (a file there would surface as a raw
        NotADirectoryError from deep inside a build)."""
        path = root
        while not os.path.lexists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        if os.path.lexists(path) and not os.path.isdir(path):
            what = "is a file" if path == root else f"lies under {path}, which is a file"
            raise DeepJITError(f"JIT cache root {root} {what}, not a directory: set {self.dir_hint} to a directory "
                               f"(or a path where one can be made)")

    def lookup(self, tag: str, digest: str) -> str | None:
        """The first root's committed ``<tag>.<digest>`` entry (marker mtime bumped), or None."""
        self.check_tag(tag)
        for root in self.roots:
            final = os.path.join(root, "cache", f"{tag}.{digest}")
            marker = os.path.join(final, COMMITTED)
            if os.path.exists(marker):
                self.check_trusted([root, os.path.join(root, "cache")], final)
                try:
                    os.utime(marker)
                except OSError:
                    pass  # read-only secondary root
                return final
        return None

    def entry(self, tag: str, digest: str, rebuild: bool = False) -> CacheEntry:
        """A hit, or a build entry in the first root; ``rebuild`` skips the lookup (after ``set_aside``)."""
        hit = None if rebuild else self.lookup(tag, digest)
        root = self.roots[0]
        if hit is not None:
            return CacheEntry(root, hit, None)
        lock = None
        if rebuild:
            self.check_tag(tag)
        self.check_root_is_a_dir(root)
        self.check_trusted([root, os.path.join(root, "tmp"), os.path.join(root, "cache"),
                            os.path.join(root, "locks")])  # before writing there
        try:
            if not rebuild:  # a rebuild (after set_aside) takes no lock: the entry it replaces was published
                lock = BuildLock(os.path.join(root, "locks", f"{tag}.{digest}"))
                hit = self.lookup(tag, digest)  # published while this process waited for the lock
                if hit is not None:
                    lock.release()
                    return CacheEntry(root, hit, None)
            return self._build_entry(root, tag, digest, lock)
        except BaseException:
            if lock is not None:
                lock.release()
            raise

    def _build_entry(self, root: str, tag: str, digest: str, lock: BuildLock | None) -> CacheEntry:
        tmp = os.path.join(root, "tmp", make_uuid())
        try:
            makedirs(os.path.dirname(tmp))
            os.mkdir(tmp, _DIR_MODE)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            later = f"; the roots after it ({':'.join(self.roots[1:])}) are only read" if len(self.roots) > 1 else ""
            raise DeepJITError(
                f"JIT cache root {root} is not writable ({exc.strerror}): kernels are compiled into the first root of "
                f"{self.dir_hint}{later}. Set it to a writable directory; a read-only cache can follow it after a "
                f"':' and is still used for lookups") from None
        if not self._reaped:
            self._reaped = True
            self.reap_stale(root)
        return CacheEntry(root, os.path.join(root, "cache", f"{tag}.{digest}"), tmp, lock)

    @staticmethod
    def reap_stale(root: str) -> list[str]:
        """Removes the stale build dirs and set-aside entries in ``<root>/tmp``; returns their names."""
        tmp_dir, now, reaped = os.path.join(root, "tmp"), time.time(), []
        try:
            names = os.listdir(tmp_dir)
        except OSError:
            return reaped
        for name in names:
            path = os.path.join(tmp_dir, name)
            if _is_stale(path, name, now):
                try:
                    safe_remove_all(path)
                except OSError:
                    continue  # another process reaps it, or it is not ours to remove
                reaped.append(name)
        return reaped

    def set_aside(self, path: str) -> str | None:
        """Moves a published entry out of the cache into its root's ``tmp/`` (reaped later, still
        readable by a process that mapped it); None when its root is read-only or it is gone."""
        root = next((r for r in self.roots if path.startswith(os.path.join(r, "cache") + os.sep)), None)
        if root is None:
            raise DeepJITError(f"{path} is not an entry of the JIT cache roots {':'.join(self.roots)}")
        aside = os.path.join(root, "tmp", make_uuid() + ".corrupt")
        try:
            makedirs(os.path.dirname(aside))
            os.rename(path, aside)
        except OSError:
            return None
        return aside
