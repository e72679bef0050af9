"""Shared-memory budget: a buffer of ``num_bytes`` gives memory to about 2 x num_bytes per rank at
construction (its operation region and one region's worth of output arena); arena blocks beyond
that get memory only when a caller keeps earlier results alive. Measured as the blocks the rank's
own segment file holds (st_blocks), so other processes' use of /dev/shm does not matter."""
import os

import torch
import torch.distributed as dist

from tests.testkit.distributed import run_ranks

from . import refs

MiB = 1 << 20


def _allocated(window) -> int:
    return os.fstat(window._own_fd).st_blocks * 512


def _budget(rank, world):
    import deep_ep
    nbytes = 32 * MiB
    buf = deep_ep.Buffer(dist.group.WORLD, nbytes, explicitly_destroy=True)
    window = buf._ep._session.transport.window
    at_build = _allocated(window)
    assert at_build <= 2 * nbytes + MiB, (at_build, nbytes)
    assert window.segment_bytes > 4 * nbytes, "the arena's address space is larger than what is committed"
    buf.destroy()

    # EPBuffer: results held alive push later outputs into arena blocks committed on first use.
    H, E, M, K = 2048, 8, 64, 4
    ep = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K, explicitly_destroy=True)
    window = ep._session.transport.window
    region = ep.num_bytes
    start = _allocated(window)
    assert start <= 2 * region + MiB, (start, region)
    idx, w = refs.make_routing(M, K, E, seed=rank)
    x = refs.make_x(M, H, seed=rank)
    first = ep.dispatch(x, idx, w, num_experts=E)
    kept = [ep.dispatch(x, idx, w, num_experts=E) for _ in range(3)]
    assert all(torch.equal(k[0], first[0]) for k in kept)
    grown = _allocated(window)
    assert start <= grown <= window.segment_bytes
    ep.destroy()
    return at_build, start, grown


def test_buffer_commits_about_twice_its_size():
    outs = run_ranks(_budget, 2, timeout=120)
    assert all(grown >= start for _, start, grown in outs)
