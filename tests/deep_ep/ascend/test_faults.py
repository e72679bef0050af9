"""Faults on the NPU's collective transport (``EP_BACKEND=ascend EP_ASCEND_TRANSPORT=hccl`` over gloo): bad ``topk_idx`` values, found on the
device and carried by the one count exchange, raise on every rank (the offending one names the
slot, the others name that rank) and the buffer keeps working; a peer that is late past the
timeout, or dies inside the payload exchange, makes every live rank raise within the timeout, and
the buffer then refuses further calls. A first dispatch on a buffer with a long timeout builds the
kernels (their lowering and twin compile must not count against the short one)."""
import os
import signal
import time

import pytest
import torch.distributed as dist

from tests.testkit.distributed import RankFailure, run_ranks

from .. import refs
from ..cases import Case, check_case
from ..faults import assert_live_ranks_failed, expect_error, record_outcome

H, E, M, K = 128, 8, 6, 2
# The collective path's own behaviour (the count exchange that carries the error words, all_to_all patched,
# CollectiveError types): pinned, as the twin's default is the window (its faults: test_ll_symm.py, test_symm_*).
ENV = {"EP_BACKEND": "ascend", "EP_ASCEND_TRANSPORT": "hccl"}


def _bad_ids(rank, world):
    import deep_ep
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                           explicitly_destroy=True, num_cpu_timeout_secs=60)
    idx, _ = refs.make_routing(M, K, E, seed=rank)
    x = refs.make_x(M, H, seed=rank)
    bad = idx.clone()
    if rank == 0:
        bad[3, 1] = E
        expect_error(lambda: buf.dispatch(x, bad, num_experts=E), ValueError,
                     f"topk_idx: expected expert ids in [-1, {E}), got topk_idx[3, 1] = {E}")
    else:
        expect_error(lambda: buf.dispatch(x, bad, num_experts=E), ValueError, "rank 0 rejected", "expected expert ids in")
    bad = idx.clone()
    if rank == 1:
        bad[2] = 5
        expect_error(lambda: buf.dispatch(x, bad, num_experts=E), ValueError,
                     "topk_idx: expected each expert at most once per token, got expert 5 twice in topk_idx[2]")
    else:
        expect_error(lambda: buf.dispatch(x, bad, num_experts=E), ValueError, "rank 1 rejected", "twice in topk_idx[2]")
    for culprit, value in ((0, 2 ** 62), (1, -2 ** 62 - 5)):  # int64 ids past int32 are reported as given
        bad = idx.clone()
        bad[4, 1] = value if rank == culprit else bad[4, 1]
        expect_error(lambda bad=bad: buf.dispatch(x, bad, num_experts=E), ValueError,
                     f"topk_idx: expected expert ids in [-1, {E}), got topk_idx[4, 1] = {value}", *([] if rank == culprit else ["rejected"]))
    check_case(buf, Case(None, True, False, num_bias=1), rank, world, H, E, M, K, seed=3)
    buf.destroy()
    return True


def test_bad_expert_ids_raise_on_every_rank_and_buffer_survives():
    assert run_ranks(_bad_ids, 2, timeout=600, env=ENV) == [True, True]


def _warm_up(x, idx):
    import deep_ep
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                           explicitly_destroy=True, num_cpu_timeout_secs=300)
    buf.dispatch(x, idx, num_experts=E * dist.get_world_size() // 2)  # the experts of _late (2 ranks) and _killed (3)
    buf.destroy()


def _late(rank, world):
    import deep_ep
    from deep_ep.ascend.transport import CollectiveError, CollectiveTimeoutError
    idx, _ = refs.make_routing(M, K, E, seed=rank)
    x = refs.make_x(M, H, seed=rank)
    _warm_up(x, idx)
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                           explicitly_destroy=True, num_cpu_timeout_secs=1)
    if rank == 1:  # misses rank 0's deadline inside the payload exchange
        exchange = buf._engine.exchange
        on_time = exchange.all_to_all
        exchange.all_to_all = lambda *a: (time.sleep(3), on_time(*a))
    start = time.monotonic()
    if rank == 0:
        expect_error(lambda: buf.dispatch(x, idx, num_experts=E), CollectiveTimeoutError, "timed out after 1 s")
    else:  # its peer gave up: the wait fails (timed out, or the peer's group closed)
        expect_error(lambda: buf.dispatch(x, idx, num_experts=E), CollectiveError, "deep_ep: an all_to_all_single")
    elapsed = time.monotonic() - start
    expect_error(lambda: buf.dispatch(x, idx, num_experts=E), deep_ep.BufferBrokenError, "destroy it")
    buf.destroy()
    return elapsed


def test_late_peer_times_out_on_every_rank():
    t0, t1 = run_ranks(_late, 2, timeout=600, env=ENV)
    assert t0 < 5 and t1 < 7


def _killed(rank, world, result_dir):
    import deep_ep
    idx, _ = refs.make_routing(M, K, E * world // 2, seed=rank)
    x = refs.make_x(M, H, seed=rank)
    _warm_up(x, idx)
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                           explicitly_destroy=True, num_cpu_timeout_secs=5)
    if rank == world - 1:  # dies after the count exchange, inside the payload exchange
        buf._engine.exchange.all_to_all = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    record_outcome(result_dir, rank, lambda: buf.dispatch(x, idx, num_experts=E * world // 2))


def test_killed_peer_mid_dispatch(tmp_path):
    with pytest.raises(RankFailure) as info:
        run_ranks(_killed, 3, str(tmp_path), timeout=600, env=ENV)
    assert_live_ranks_failed(tmp_path, info.value, (0, 1), 9, ("CollectiveError", "CollectiveTimeoutError"))
