"""BucketBuffer over the symmetric window (``EP_BACKEND=ascend EP_ASCEND_TRANSPORT=symm``,
deep_ep/ascend/bucket_window.py and bucket.asc) in real processes over gloo and the twin's shared-memory
windows: the storage is the window, every collective (all-gather in place and into ``dsts``, all-reduce,
reduce-scatter in FP32 and BF16 communication precision, several tensors at once, inside a session, zero
elements) matches the host engine and the Ascend engine's collectives (``EP_ASCEND_TRANSPORT=hccl``) bit for
bit, reads nothing back on the host (tests/testkit/host_reads.py), and bad inputs are refused by name before
any kernel runs. A rank that never arrives fails the waiting kernel naming rank and flag. Ranks on two hosts
(simulated) take the collectives by default."""
import contextlib
import re
import time

import pytest
import torch
import torch.distributed as dist

from tests.testkit.distributed import environ, run_ranks
from tests.testkit.host_reads import DeviceOnly, mark

SYMM = {"EP_BACKEND": "ascend", "EP_ASCEND_TRANSPORT": "symm"}
N = 96   # elements per rank's shard (not a multiple of the kernels' tiles: 3 x 32)
BIG = 17000   # past one gather tile (64 KiB) and two reduction tiles (8192 elements) per rank


def _make(world, **env):
    """A bucket with: a gathered tensor (world x N), an all-reduced pair, a reduce-scattered tensor."""
    import deep_ep
    with environ(**env):
        plan = deep_ep.BufferAllocator()
        t = {"gathered": plan.allocate((world * N,), torch.float32),
             "shard": plan.allocate((N,), torch.bfloat16),
             "reduced": plan.allocate((2 * N + 5,), torch.float32),
             "reduced2": plan.allocate((7,), torch.float32),
             "scattered": plan.allocate((world * N,), torch.float32),
             "big": plan.allocate((world * BIG,), torch.float32)}
        buf = deep_ep.BucketBuffer(dist.group.WORLD, plan, explicitly_destroy=True)
    return buf, t


def _rand(rank, n, salt, dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 * salt + rank)
    return (torch.randn(n, generator=g) * 3).to(dtype)


def _unmark(*ts):
    for t in ts:
        if isinstance(t, torch.Tensor):
            t.__dict__.pop("_device_only", None)


def _steps(buf, t, rank, world, guard):
    """Every collective once; returns what a caller sees (cloned, unguarded)."""
    got = {}
    scope = DeviceOnly if guard else contextlib.nullcontext
    t["gathered"][rank * N:(rank + 1) * N] = _rand(rank, N, 1)
    t["shard"].copy_(_rand(rank, N, 2, torch.bfloat16))
    t["reduced"].copy_(_rand(rank, 2 * N + 5, 3))
    t["reduced2"].copy_(_rand(rank, 7, 4))
    t["scattered"].copy_(_rand(rank, world * N, 5))
    t["big"][rank * BIG:(rank + 1) * BIG] = _rand(rank, BIG, 10)
    dst = torch.empty(world, N, dtype=torch.bfloat16)
    plain = [_rand(rank, 3 * world, 6), _rand(rank, 10, 7), torch.empty(0)]
    if guard:
        mark(*t.values(), dst, *plain, buf.storage, buf._all)  # the storage and the staging area behind it
    with scope():
        got["gather"] = buf.all_gather(t["gathered"][rank * N:(rank + 1) * N]).wait()
        got["gather_dst"] = buf.all_gather([t["shard"]], dsts=[dst]).wait()[0]
        got["big_gather"] = buf.all_gather(t["big"][rank * BIG:(rank + 1) * BIG]).wait() * 1
        got["big_scatter"] = buf.reduce_scatter(t["big"], comm_precision="bf16", scale=0.1).wait()
        buf.all_reduce(t["big"], scale=3.0).wait()
        buf.all_reduce([t["reduced"], t["reduced2"]], scale=0.3).wait()
        got["scatter32"] = buf.reduce_scatter(t["scattered"], scale=0.7).wait()
        got["scattered"] = t["scattered"] * 1
        t["scattered"].copy_(_rand(rank, world * N, 8))
        got["scatter16"] = buf.reduce_scatter(t["scattered"], comm_precision="bf16", scale=1.5).wait()
        with buf.session():
            got["s_gather"] = buf.all_gather(plain[1]).wait()
            got["s_scatter"] = buf.reduce_scatter(plain[0], comm_precision="bf16").wait()
            buf.all_reduce(plain[1], scale=2.0).wait()
            got["s_empty"] = buf.all_gather(plain[2]).wait()
            buf.all_reduce(plain[2]).wait()
    got.update(big=t["big"], reduced=t["reduced"], reduced2=t["reduced2"], dst=dst, plain0=plain[0], plain1=plain[1],
               gathered=t["gathered"])
    out = {k: v.clone() for k, v in got.items()}
    _unmark(*got.values(), *t.values(), dst, *plain, buf.storage, buf._all, *out.values())
    return out


def _bits(a: dict, b: dict) -> list:
    return [k for k in a if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape
            or not torch.equal(a[k].view(torch.uint8) if a[k].numel() else a[k],
                               b[k].view(torch.uint8) if b[k].numel() else b[k])]


def _against_host(rank, world, full=True):
    from deep_ep.ascend.bucket_window import BucketWindow
    win, tw = _make(world, **SYMM)
    if not full:  # the window against the host engine only
        host, th = _make(world, EP_BACKEND=None, EP_ASCEND_TRANSPORT=None)
        bits = _bits(_steps(win, tw, rank, world, guard=True), _steps(host, th, rank, world, guard=False))
        win.destroy()
        host.destroy()
        return bits
    assert isinstance(win._win, BucketWindow)
    assert win.storage.data_ptr() == win._win.window.data(rank, torch.uint8, (1,)).data_ptr()
    host, th = _make(world, EP_BACKEND=None, EP_ASCEND_TRANSPORT=None)
    coll, tc = _make(world, EP_BACKEND="ascend", EP_ASCEND_TRANSPORT="hccl")
    assert host._win is None and coll._win is None
    got_w = _steps(win, tw, rank, world, guard=True)
    got_h = _steps(host, th, rank, world, guard=False)
    got_c = _steps(coll, tc, rank, world, guard=False)
    seq = win._win.seq
    # the BF16 communication precision rounds the terms: it differs from FP32 somewhere
    differs = not torch.equal(got_h["scatter16"], _fp32_scatter(rank, world))
    bad = _refusals(win, tw, rank, world)
    bad.append(_late_reader(win, tw, rank, world))
    for b in (win, host, coll):
        b.destroy()
    bad.append(_late_arrival(rank, world))
    # Ranks on two hosts (simulated): no window spans them, the default takes the collectives with the same bits
    apart, ta = _make(world, DJ_SYMM_HOST_ID=f"sim-host-{rank}", EP_BACKEND="ascend", EP_ASCEND_TRANSPORT=None)
    bad.append(apart._win is None and _bits(_steps(apart, ta, rank, world, guard=False), got_h) == [])
    apart.destroy()
    return _bits(got_w, got_h), _bits(got_w, got_c), seq, differs, bad


def _late_reader(buf, t, rank, world):
    """Rank 1 reads its peers late (past the handshake): rank 0 must not overwrite its in-place all-reduce
    source before every rank has read it (the departure flags)."""
    from deep_ep.ascend.bucket_window import BucketWindow
    on_time = BucketWindow.reduce
    if rank == 1:
        def reduce(*a, **k):
            time.sleep(0.3)
            return on_time(*a, **k)
        BucketWindow.reduce = reduce
    try:
        t["reduced2"].copy_(_rand(rank, 7, 9))
        buf.all_reduce(t["reduced2"], scale=0.5).wait()
    finally:
        BucketWindow.reduce = on_time
    want = torch.zeros(7)
    for r in range(world):
        want += _rand(r, 7, 9)
    return torch.equal(t["reduced2"], want * 0.5)


def _late_arrival(rank, world):
    """A rank late past the handshake (inside the collective) fails the waiting kernels after the window's
    timeout, naming rank and flag; the buffer is then broken."""
    import deep_ep
    from deep_ep.ascend.bucket_window import BucketWindow
    from deepjit.backends.ascend_twin.kernel import TwinLaunchError

    from ..faults import expect_error
    buf, t = _make(world, **SYMM)
    buf._win.window.timeout_s = 1.0
    on_time = BucketWindow.arrive
    if rank == 1:
        def arrive(self):
            time.sleep(2.5)
            return on_time(self)
        BucketWindow.arrive = arrive
    try:
        # rank 0 waits for rank 1's arrival (flag 1); rank 1, late, then waits for rank 0's departure (flag R)
        msg = expect_error(lambda: buf.all_reduce(t["reduced2"]), TwinLaunchError, "dj_symm::signal_wait_until",
                           f"rank {rank} waited", f"for flag {1 if rank == 0 else world} of its window")
    finally:
        BucketWindow.arrive = on_time
    expect_error(lambda: buf.all_reduce(t["reduced2"]), deep_ep.BufferBrokenError)
    buf.destroy()
    return bool(msg)


def _fp32_scatter(rank, world):
    acc = torch.zeros(N)
    for r in range(world):
        acc += _rand(r, world * N, 8)[rank * N:(rank + 1) * N]
    return acc * 1.5


def _refusals(buf, t, rank, world):
    """Bad inputs are refused by name before any kernel runs: no step taken, nothing written."""
    before, seq = buf.storage.clone(), buf._win.seq
    cases = [
        (lambda: buf.reduce_scatter(t["scattered"], comm_precision="fp8"), ValueError,
         "comm_precision: expected 'fp32' or 'bf16', got 'fp8'"),
        (lambda: buf.all_reduce(t["shard"]), TypeError,
         "srcs[0]: expected dtype torch.float32 for all_reduce, got torch.bfloat16"),
        (lambda: buf.all_gather([t["shard"]], dsts=[torch.empty(world, N)]), TypeError,
         "dsts[0]: expected dtype torch.bfloat16 like srcs[0], got torch.float32"),
        (lambda: buf.all_gather([t["shard"]], dsts=[torch.empty(world, N + 1, dtype=torch.bfloat16)]), ValueError,
         f"dsts[0]: expected {world} x {N} elements, got {world * (N + 1)}"),
        (lambda: buf.all_gather([t["shard"]], dsts=[torch.empty(N, world, dtype=torch.bfloat16).t()]),
         ValueError, "dsts[0]: expected a contiguous tensor on the storage's device cpu, got a non-contiguous"),
        (lambda: buf.reduce_scatter(t["reduced2"]), ValueError,
         f"srcs[0]: expected a number of elements that is a multiple of the {world} ranks, got 7"),
        (lambda: buf.all_reduce(torch.ones(4)), ValueError,
         "srcs[0]: expected a tensor in this BucketBuffer's storage"),
    ]
    ok = []
    for fn, exc, msg in cases:
        with pytest.raises(exc, match="^" + re.escape(msg)):
            fn()
        ok.append(True)
    return ok + [buf._win.seq == seq, torch.equal(buf.storage, before)]


def test_bucket_window_matches_host_two_ranks():
    for bits_host, bits_coll, seq, differs, bad in run_ranks(_against_host, 2, timeout=180):
        assert bits_host == [] and bits_coll == []
        assert seq == 13 and differs and all(bad)


def test_bucket_window_matches_host_three_ranks():
    assert run_ranks(_against_host, 3, False, timeout=180) == [[]] * 3
