"""Faults on the window transport of normal-mode dispatch (``EP_BACKEND=ascend EP_ASCEND_TRANSPORT=symm``:
the counts and rows move by the kernels of symm_exchange.py). A peer late past the window's timeout inside
an exchange makes every rank's waiting kernel fail within the timeout, naming the rank that waited and
the flag, and the buffer then refuses further calls; a peer killed inside the payload exchange makes the
live ranks fail within the timeout. The window's /dev/shm names are gone once it is created
(tests/deepjit/test_symm_window.py), so a killed rank leaves none. The collective transport's faults:
test_faults.py; the low-latency window's: test_ll_symm.py; BucketBuffer's: test_bucket_symm.py."""
import os
import signal
import time

import pytest
import torch.distributed as dist

from tests.testkit.distributed import RankFailure, run_ranks

from .. import refs
from ..faults import assert_live_ranks_failed, expect_error, late_first_call, record_outcome

H, E, M, K = 128, 8, 6, 2
ENV = {"EP_BACKEND": "ascend", "EP_ASCEND_TRANSPORT": "symm"}


def _buffer(timeout_s):
    import deep_ep
    return deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                            explicitly_destroy=True, num_cpu_timeout_secs=timeout_s)


def _inputs(rank, world):
    idx, _ = refs.make_routing(M, K, E * world // 2, seed=rank)
    return refs.make_x(M, H, seed=rank), idx


def _warm(x, idx, world):
    """A first dispatch with a long timeout builds the kernels (not counted against the short one)."""
    buf = _buffer(300)
    assert buf._engine.symm is not None, "the window transport must serve this test"
    buf.dispatch(x, idx, num_experts=E * world // 2)
    buf.destroy()


def _late(rank, world):
    import deep_ep
    from deep_ep.ascend.symm_exchange import SymmExchange
    from deepjit.backends.ascend_twin.kernel import TwinLaunchError
    x, idx = _inputs(rank, world)
    _warm(x, idx, world)
    buf = _buffer(1)
    on_time = SymmExchange.exchange
    if rank == 1:  # late past the handshake, inside the count exchange
        SymmExchange.exchange = late_first_call(on_time, 3)
    start = time.monotonic()
    try:
        # rank 0 waits for rank 1's counts; rank 1, late, gets rank 0's counts and then waits for its rows
        msg = expect_error(lambda: buf.dispatch(x, idx, num_experts=E * world // 2), TwinLaunchError,
                           "dj_symm::signal_wait_until", f"rank {rank} waited", "for flag", "a peer never signalled it")
    finally:
        SymmExchange.exchange = on_time
    elapsed = time.monotonic() - start
    expect_error(lambda: buf.dispatch(x, idx, num_experts=E * world // 2), deep_ep.BufferBrokenError, "destroy it")
    buf.destroy()
    return bool(msg), elapsed


def test_late_peer_fails_every_rank_within_the_timeout():
    (ok0, t0), (ok1, t1) = run_ranks(_late, 2, timeout=600, env=ENV)
    assert ok0 and ok1
    assert t0 < 5 and t1 < 3 + 5, (t0, t1)  # a 1 s timeout (rank 1 slept 3 s first)


def _killed(rank, world, result_dir):
    from deep_ep.ascend.symm_exchange import SymmExchange
    x, idx = _inputs(rank, world)
    _warm(x, idx, world)
    buf = _buffer(5)
    if rank == world - 1:  # dies after the count exchange, inside the payload exchange
        calls = [0]
        on_time = SymmExchange.exchange

        def exchange(*a):
            calls[0] += 1
            if calls[0] == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return on_time(*a)
        SymmExchange.exchange = exchange
    record_outcome(result_dir, rank, lambda: buf.dispatch(x, idx, num_experts=E * world // 2))


def test_killed_peer_mid_dispatch_fails_the_live_ranks(tmp_path):
    with pytest.raises(RankFailure) as info:
        run_ranks(_killed, 3, str(tmp_path), timeout=600, env=ENV)
    outcomes = assert_live_ranks_failed(tmp_path, info.value, (0, 1), 9, ("TwinLaunchError",))
    for rank, outcome in enumerate(outcomes):
        assert "dj_symm::signal_wait_until" in outcome and f"rank {rank} waited" in outcome, outcome
