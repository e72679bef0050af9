"""Commands run in a private mount namespace over a small tmpfs (``unshare -m``): a tiny /dev/shm or
a read-only cache root without touching the machine's mounts. Needs root (or user namespaces);
``mount_unavailable()`` says why not, for a skip."""
from __future__ import annotations

import functools
import shutil
import subprocess


def private_tmpfs_argv(mountpoint: str, size: str, argv: list[str], read_only: bool = False) -> list[str]:
    """``argv`` run with a fresh tmpfs of ``size`` (e.g. "4m") at ``mountpoint``, seen by it and its children only."""
    remount = ' && mount -o remount,ro "$1"' if read_only else ""
    script = f'mount -t tmpfs -o size={size},mode=755 tmpfs "$1"{remount} && shift && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", mountpoint, *argv]


@functools.cache
def mount_unavailable() -> str | None:
    """None when a private tmpfs can be mounted here, else the reason."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare/mount not installed"
    proc = subprocess.run(private_tmpfs_argv("/mnt", "1m", ["true"]), capture_output=True, text=True)
    if proc.returncode != 0:
        return f"cannot mount a private tmpfs (unshare -m + mount -t tmpfs): {proc.stderr.strip() or proc.returncode}"
    return None
