"""Multi-root disk cache with atomic publication (spec: deepjit §8).

Entries live in ``<root>/cache/<tag>.<digest>/`` and are valid only with a ``.committed`` marker.
Builds happen in ``<roots[0]>/tmp/<uuid>/`` and are published by one ``rename``; only the first
root is ever written, later roots may be read-only.

Loading a cached shared object runs its code, so every directory and file an entry is loaded
from must be writable by nobody but the current user (or root), unless the user opts in with
``<PREFIX>_JIT_TRUST_SHARED_CACHE=1`` for a deliberately shared group cache.
"""
from __future__ import annotations

import os
import random
import re
import stat
import threading
from collections.abc import Sequence

from .env import Env
from .errors import CacheSecurityError, DeepJITError

COMMITTED = ".committed"
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


class CacheEntry:
    """A hit (``path`` is the published dir) or a build (fill ``tmp_path``, then ``commit``)."""

    def __init__(self, root: str, final_path: str, tmp_path: str | None):
        self.root = root
        self.final_path = final_path
        self.tmp_path = tmp_path
        self.committed = tmp_path is None

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
        return self.final_path

    def abandon(self) -> None:
        if not self.committed and self.tmp_path is not None:
            safe_remove_all(self.tmp_path)
            self.tmp_path = None

    def __del__(self):
        try:
            self.abandon()
        except Exception:
            pass


class DiskCache:
    def __init__(self, roots: Sequence[str], trust_shared: bool = False, trust_hint: str = "DJ_JIT_TRUST_SHARED_CACHE"):
        roots = [os.fspath(r) for r in roots]
        if not roots:
            raise DeepJITError("disk cache path list must not be empty")
        for r in roots:
            if not r:
                raise DeepJITError("disk cache path list contains an empty path")
        self.roots = [os.path.abspath(r) for r in roots]
        self.trust_shared = trust_shared
        self.trust_hint = trust_hint

    @classmethod
    def from_env(cls, env: Env) -> DiskCache:
        trust = env.get_bool("JIT_TRUST_SHARED_CACHE", False)
        hint = f"{env.prefix}_JIT_TRUST_SHARED_CACHE=1 (or DJ_JIT_TRUST_SHARED_CACHE=1)"
        raw = env.get_str("JIT_CACHE_DIR")
        if raw is None:
            home = os.environ.get("HOME", "")
            if not home:
                raise DeepJITError(f"{env.prefix}_JIT_CACHE_DIR / DJ_JIT_CACHE_DIR is not set and HOME is empty")
            return cls([os.path.join(home, ".dj")], trust, hint)
        return cls(raw.split(":"), trust, hint)

    @staticmethod
    def check_tag(tag: str) -> None:
        if not isinstance(tag, str) or not _TAG_RE.match(tag):
            raise DeepJITError(f"cache tag must contain only letters, digits, or underscores: {tag!r}")

    def check_trusted(self, dirs: Sequence[str], entry: str | None = None) -> None:
        """Refuses ``dirs`` and everything inside ``entry`` if another user could write to them."""
        if self.trust_shared:
            return
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

    def entry(self, tag: str, digest: str) -> CacheEntry:
        hit = self.lookup(tag, digest)
        root = self.roots[0]
        if hit is not None:
            return CacheEntry(root, hit, None)
        self.check_trusted([root, os.path.join(root, "tmp"), os.path.join(root, "cache")])
        tmp = os.path.join(root, "tmp", make_uuid())
        makedirs(os.path.dirname(tmp))
        os.mkdir(tmp, _DIR_MODE)
        return CacheEntry(root, os.path.join(root, "cache", f"{tag}.{digest}"), tmp)
