"""Shared memory left by a build that every rank was killed in (issue: 812 MiB of /dev/shm names
leaked a run): the names of a window whose creators are all dead are reaped by the next window
creation or deep_ep buffer construction; names whose creators live are kept."""
import multiprocessing as mp
import os
import signal
import time

import pytest
import torch.distributed as dist

from tests.testkit.distributed import free_port, run_ranks

SHM = "/dev/shm"


def _stuck_in_build(rank, world, port, ready):
    import deep_ep
    from deepjit.symm import SymmetricWindow
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    mapped = SymmetricWindow._map_peer_segments

    def then_stop(self):  # every segment exists and is mapped; the names are not unlinked yet
        mapped(self)
        ready.put(os.getpid())
        time.sleep(600)

    SymmetricWindow._map_peer_segments = then_stop
    deep_ep.Buffer(dist.group.WORLD, 4 << 20)


def _names_of(pids):
    return sorted(n for n in os.listdir(SHM) if n.startswith("dj-symm-") and any(f"-{p}-" in n for p in pids))


def _build_again(rank, world):
    import deep_ep
    deep_ep.Buffer(dist.group.WORLD, 1 << 20, explicitly_destroy=True).destroy()
    return True


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_names_of_a_build_killed_on_every_rank_are_reaped(sig):
    from deepjit.symm import reap_orphaned_segments
    ctx = mp.get_context("spawn")
    ready, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_stuck_in_build, args=(r, 2, port, ready), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    try:
        pids = {ready.get(timeout=60), ready.get(timeout=60)}
        leaked = _names_of(pids)
        assert len(leaked) == 2, leaked            # one segment per rank, mid-build
        assert not set(reap_orphaned_segments()) & set(leaked)
        assert _names_of(pids) == leaked, "names of live creators must be kept"
    finally:
        for p in procs:
            os.kill(p.pid, sig)
        for p in procs:
            p.join(timeout=30)
    assert all(p.exitcode == -sig for p in procs)
    assert _names_of(pids) == leaked, "a killed build leaves its names (what the reaper is for)"
    assert run_ranks(_build_again, 2, timeout=120) == [True, True]
    assert _names_of(pids) == [], "the next construction reaps them"
