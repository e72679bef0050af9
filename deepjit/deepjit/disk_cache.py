"""Multi-root disk cache with atomic publication (spec: deepjit §8).

Entries live in ``<root>/cache/<tag>.<digest>/`` and are valid only with a ``.committed`` marker.
Builds happen in ``<roots[0]>/tmp/<uuid>/`` and are published by one ``rename``; only the first
root is ever written, later roots may be read-only.
"""
from __future__ import annotations

import os
import random
import re
import stat
import threading
from typing import Optional, Sequence

from .env import Env
from .errors import CacheSecurityError, DeepJITError

COMMITTED = ".committed"
_TAG_RE = re.compile(r"[A-Za-z0-9_]+\Z")
_rng = threading.local()


def make_uuid() -> str:
    gen = getattr(_rng, "gen", None)
    if gen is None or getattr(_rng, "pid", None) != os.getpid():
        gen = _rng.gen = random.Random(int.from_bytes(os.urandom(8), "little") ^ threading.get_ident())
        _rng.pid = os.getpid()
    return f"{os.getpid()}-" + "-".join(f"{gen.getrandbits(32):08x}" for _ in range(3))


def write_file_sync(path: str, data) -> None:
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(path, "wb") as f:
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
    """fsync every regular file, then each directory bottom-up."""
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                continue
            fd = os.open(full, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
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


def check_trusted(path: str, trust_shared: bool) -> None:
    """Refuse a directory other users can write to: its shared objects would be run blindly."""
    if trust_shared:
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    uid = os.getuid()
    if st.st_uid not in (uid, 0) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise CacheSecurityError(
            f"JIT cache path {path} is writable by other users (mode {oct(st.st_mode & 0o7777)}, owner uid "
            f"{st.st_uid}); loading from it would run their code. Fix its permissions, or set "
            f"<PREFIX>_JIT_TRUST_SHARED_CACHE=1 (or DJ_JIT_TRUST_SHARED_CACHE=1) for a deliberately shared cache")


class CacheEntry:
    """A hit (``path`` is the published dir) or a build (``tmp_path`` to fill, then ``commit``)."""

    def __init__(self, final_path: str, tmp_path: Optional[str]):
        self.final_path = final_path
        self.tmp_path = tmp_path
        self.committed = tmp_path is None

    @property
    def is_hit(self) -> bool:
        return self.tmp_path is None

    @property
    def path(self) -> str:
        return self.final_path if self.committed else self.tmp_path

    def commit(self) -> str:
        if self.committed:
            return self.final_path
        write_file_sync(os.path.join(self.tmp_path, COMMITTED), b"")
        fsync_tree(self.tmp_path)
        parent = os.path.dirname(self.final_path)
        os.makedirs(parent, exist_ok=True)
        try:
            os.rename(self.tmp_path, self.final_path)
        except OSError:
            if not os.path.exists(os.path.join(self.final_path, COMMITTED)):
                raise
            safe_remove_all(self.tmp_path)  # another writer won: adopt its entry
        else:
            fsync_dir(parent)
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
    def __init__(self, roots: Sequence[str], trust_shared: bool = False):
        roots = [os.fspath(r) for r in roots]
        if not roots:
            raise DeepJITError("disk cache path list must not be empty")
        for r in roots:
            if not r:
                raise DeepJITError("disk cache path list contains an empty path")
        self.roots = [os.path.abspath(r) for r in roots]
        self.trust_shared = trust_shared

    @classmethod
    def from_env(cls, env: Env) -> "DiskCache":
        trust = env.get_bool("JIT_TRUST_SHARED_CACHE", False)
        raw = env.get_str("JIT_CACHE_DIR")
        if raw is None:
            home = os.environ.get("HOME", "")
            if not home:
                raise DeepJITError("JIT_CACHE_DIR is not set and HOME is empty")
            return cls([os.path.join(home, ".dj")], trust)
        return cls(raw.split(":"), trust)

    @staticmethod
    def check_tag(tag: str) -> None:
        if not isinstance(tag, str) or not _TAG_RE.match(tag):
            raise DeepJITError(f"cache tag must contain only letters, digits, or underscores: {tag!r}")

    def check_trusted(self, path: str) -> None:
        """Checks an entry and every directory from it up to its cache root."""
        for root in self.roots:
            if path.startswith(root + os.sep):
                cur = path
                while True:
                    check_trusted(cur, self.trust_shared)
                    if cur == root:
                        break
                    cur = os.path.dirname(cur)
                return
        check_trusted(path, self.trust_shared)

    def lookup(self, tag: str, digest: str) -> Optional[str]:
        self.check_tag(tag)
        for root in self.roots:
            final = os.path.join(root, "cache", f"{tag}.{digest}")
            marker = os.path.join(final, COMMITTED)
            if os.path.exists(marker):
                try:
                    os.utime(marker)
                except OSError:
                    pass
                return final
        return None

    def entry(self, tag: str, digest: str) -> CacheEntry:
        hit = self.lookup(tag, digest)
        if hit is not None:
            return CacheEntry(hit, None)
        root = self.roots[0]
        tmp = os.path.join(root, "tmp", make_uuid())
        os.makedirs(tmp)
        return CacheEntry(os.path.join(root, "cache", f"{tag}.{digest}"), tmp)
