"""A /dev/shm too small for the buffers (Docker's default is 64 MiB) fails at construction with a
RuntimeError naming the bytes needed, the bytes free and the mount, on every rank, instead of a
SIGBUS at the first dispatch. Run over a private 4 MiB tmpfs mounted on /dev/shm (unshare -m)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from tests.testkit.private_mount import mount_unavailable, private_tmpfs_argv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _small_shm(rank, world):
    import deep_ep
    from deepjit.symm import SymmetricWindow
    # What fits is reserved up front: every byte can be written.
    win = SymmetricWindow.create(None, 512 << 10, name_hint="small_shm", num_signals=8, timeout_s=30)
    win.tensor(rank, torch.uint8, (512 << 10,)).fill_(rank + 1)
    win.barrier()
    ok = int(win.tensor(rank, torch.uint8, (512 << 10,)).sum()) == (rank + 1) * (512 << 10)
    win.destroy()
    try:
        deep_ep.EPBuffer(dist.group.WORLD, num_bytes=8 << 20, explicitly_destroy=True, num_cpu_timeout_secs=30)
    except RuntimeError as exc:
        return ok, str(exc)
    return ok, "no error"


@pytest.mark.skipif(mount_unavailable() is not None, reason=str(mount_unavailable()))
def test_small_dev_shm_fails_at_construction_with_sizes():
    child = textwrap.dedent("""
        from tests.testkit.distributed import run_ranks
        from tests.deep_ep.test_small_shm import _small_shm
        for ok, msg in run_ranks(_small_shm, 2, timeout=120):
            print(ok, msg.replace("\\n", " "))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(private_tmpfs_argv("/dev/shm", "4m", [sys.executable, "-c", child]), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().split("\n")
    assert len(lines) == 2, proc.stdout
    for line in lines:
        ok, msg = line.split(" ", 1)
        assert ok == "True"
        assert "cannot reserve" in msg and "bytes of shared memory" in msg and "on /dev/shm" in msg, msg
        assert "bytes free" in msg and "No space left on device" in msg, msg
