"""deepjit.symm.SymmetricWindow across real processes: peer views, signals, bounded waits, failures,
and no /dev/shm names left behind."""
import glob
import os
import signal
import time

import pytest
import torch

from tests.testkit.distributed import RankFailure, run_ranks


def _names(hint):
    return glob.glob(f"/dev/shm/dj-symm-{hint}-*")


def _basic(rank, world, hint):
    import torch.distributed as dist

    from deepjit.symm import PeerAbortedError, PeerTimeoutError, SymmetricWindow

    win = SymmetricWindow.create(None, 4096, name_hint=hint, num_signals=16, timeout_s=20)
    dist.barrier()
    out = {"names_after_create": _names(hint), "local": (win.local_rank, win.num_local_ranks)}
    # Every rank writes a row of its own rank id into slot `rank` of every peer's region.
    for peer in range(world):
        win.tensor(peer, torch.int32, (world, 4))[rank].fill_(100 + rank)
    win.notify_lanes(0, 1)
    win.wait_lanes(0, 1)
    out["rows"] = win.tensor(rank, torch.int32, (world, 4))[:, 0].tolist()
    # A peer's view aliases the peer's own memory (not a copy).
    peer = (rank + 1) % world
    out["alias"] = win.tensor(peer, torch.int64, (1,), offset=1024).data_ptr() == win.data_ptr(peer) + 1024
    # What a host kernel gets to signal and wait by itself: the window's own functions and lanes,
    # called here through ctypes the way a kernel calls them.
    import ctypes
    notify_fn, wait_fn, abort_word, pidfds = win.kernel_wait_context()
    notify_addrs, wait_addrs = win.kernel_lanes(8)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(notify_fn)(
        notify_addrs.data_ptr(), world, 3)
    status = torch.full((3,), -1, dtype=torch.int64)
    ctypes.CFUNCTYPE(None, *[ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p])(wait_fn)(
        wait_addrs.data_ptr(), world, 3, abort_word, pidfds.data_ptr(), world, int(20e9), status.data_ptr())
    out["kernel_round"] = int(status[0])  # 0: every lane reached 3
    win.wait_lanes(8, 3)  # the same lanes, seen by the Python wait
    try:
        win.raise_wait_status(torch.tensor([1, 1, 2]), 3, "kernel wait")
    except PeerTimeoutError as exc:
        out["kernel_timeout"] = str(exc)
    win.barrier()
    # Bounds are checked before any view exists.
    errors = []
    for args in ((0, torch.int32, (2000,), 0), (0, torch.int32, (1,), 2), (world, torch.int8, (1,), 0)):
        try:
            win.tensor(*args)
        except ValueError as exc:
            errors.append(str(exc))
    out["bound_errors"] = errors
    # Timeout: slot 5 is never written by rank 1; rank 0 must give up and name the lane.
    if rank != 1:
        win.notify_lanes(4, 1)
    if rank == 0:
        start = time.monotonic()
        try:
            win.wait_lanes(4, 1, timeout_s=0.3, what="test wait")
        except PeerTimeoutError as exc:
            out["timeout"] = (str(exc), time.monotonic() - start)
    dist.barrier()
    # Abort: the last rank aborts; rank 0's next wait fails at once instead of waiting 20 s.
    if rank == world - 1:
        win.abort()
    dist.barrier()
    if rank == 0:
        start = time.monotonic()
        try:
            win.wait_lanes(6, 1)
        except PeerAbortedError as exc:
            out["aborted"] = (str(exc), time.monotonic() - start)
    win.destroy()
    # Collective argument check: a rank with a different size is named on every rank.
    try:
        SymmetricWindow.create(None, 4096 + 4096 * (rank == 1), name_hint=hint)
    except ValueError as exc:
        out["mismatch"] = str(exc)
    return out


def test_window_views_signals_and_failures():
    hint = f"t{os.getpid()}a"
    outs = run_ranks(_basic, 3, hint, timeout=90)
    for rank, out in enumerate(outs):
        assert out["names_after_create"] == [], "segment names must be unlinked once every rank has mapped"
        assert out["local"] == (rank, 3)
        assert out["rows"] == [100, 101, 102]
        assert out["alias"]
        assert out["kernel_round"] == 0
        assert "kernel wait" in out["kernel_timeout"] and "local rank 1" in out["kernel_timeout"]
        assert len(out["bound_errors"]) == 3
        assert out["bound_errors"][0] == "shape: expected a view inside the window's 4096 data bytes from offset 0, got 8000 bytes"
        assert out["bound_errors"][1] == "offset: expected a non-negative multiple of 4 for torch.int32, got 2"
        assert out["bound_errors"][2] == "peer: expected a local rank index in [0, 3), got 3"
        assert "rank 1 has (8192, 256)" in out["mismatch"]
    msg, seconds = outs[0]["timeout"]
    assert "lane 5 written by local rank 1" in msg and "test wait" in msg and 0.25 < seconds < 5
    msg, seconds = outs[0]["aborted"]
    assert "local rank 2" in msg and seconds < 5
    assert _names(hint) == []


def _hosts(rank, world, hint):
    from deepjit.symm import SymmetricWindow

    os.environ["DJ_SYMM_HOST_ID"] = f"sim-host-{rank // 2}"
    win = SymmetricWindow.create(None, 256, name_hint=hint, timeout_s=20)
    win.tensor(win.local_rank, torch.int64, (1,)).fill_(rank)
    win.barrier()
    other = 1 - win.local_rank
    return win.local_ranks, int(win.tensor(other, torch.int64, (1,)).item())


def test_window_spans_only_ranks_of_one_host():
    outs = run_ranks(_hosts, 4, f"t{os.getpid()}b", timeout=90)
    assert outs == [([0, 1], 1), ([0, 1], 0), ([2, 3], 3), ([2, 3], 2)]


def _dies(rank, world, hint, result_path, phase):
    from deepjit.symm import PeerDiedError, SymmetricWindow

    def die(*_):
        os.kill(os.getpid(), signal.SIGKILL)

    if phase == "create" and rank == 1:
        SymmetricWindow._map_own_segment = die  # dies after the identity exchange, before its segment
    start = time.monotonic()
    try:
        win = SymmetricWindow.create(None, 64, name_hint=hint, timeout_s=30)
        if rank == 1:
            die()
        start = time.monotonic()
        win.wait_lanes(0, 1)
    except PeerDiedError as exc:
        with open(result_path, "w") as f:
            f.write(f"{exc}|{time.monotonic() - start:.3f}")


@pytest.mark.parametrize("phase", ["wait", "create"])
def test_dead_peer_is_detected_and_names_are_removed(tmp_path, phase):
    hint = f"t{os.getpid()}{phase[0]}"
    result = tmp_path / "rank0.txt"
    with pytest.raises(RankFailure) as info:
        run_ranks(_dies, 2, hint, str(result), phase, timeout=60)
    assert "--- rank 0 ---" not in str(info.value), str(info.value)
    assert "rank 1" in str(info.value)
    msg, seconds = result.read_text().split("|")
    assert "local rank 1" in msg and "exited" in msg
    assert float(seconds) < 10
    assert _names(hint) == []
