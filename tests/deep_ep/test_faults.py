"""Bad input and faults: every live rank gets a clear exception within the timeout, nothing hangs,
the buffer keeps working after rejected arguments, a recreated buffer is clean after a failure,
and no shared-memory names are left behind."""
import glob
import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from tests.testkit.distributed import RankFailure, in_sequence, run_ranks

from . import refs
from .cases import Case, check_case
from .faults import assert_live_ranks_failed, expect_error, record_outcome

H, E, M, K = 128, 16, 32, 4


def _bad_inputs(rank, world):
    import deep_ep
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                           explicitly_destroy=True, num_cpu_timeout_secs=30)
    idx, w = refs.make_routing(M, K, E, seed=rank)
    x = refs.make_x(M, H, seed=rank)

    # Shapes differ across ranks: every rank names the argument and both values.
    hidden = H if rank == 0 else H // 2
    expect_error(lambda: buf.dispatch(refs.make_x(M, hidden, 0), idx, num_experts=E), ValueError,
            "ranks disagree", "hidden")
    # One rank exceeds the agreed capacity: it says so, the others name it.
    big = M + 5 if rank == 1 else M
    big_idx, _ = refs.make_routing(big, K, E, seed=5)
    if rank == 1:
        expect_error(lambda: buf.dispatch(refs.make_x(big, H, 0), big_idx, num_experts=E), ValueError,
                "x: expected at most num_max_tokens_per_rank (32) tokens, the capacity every rank agreed on, "
                "got 37 tokens")
    else:
        expect_error(lambda: buf.dispatch(refs.make_x(big, H, 0), big_idx, num_experts=E), ValueError,
                "rank 1 rejected", "at most num_max_tokens_per_rank")
    # Expert id out of range on rank 0, a duplicate expert on rank 1.
    bad = idx.clone()
    if rank == 0:
        bad[3, 1] = E
        expect_error(lambda: buf.dispatch(x, bad, num_experts=E), ValueError,
                     f"topk_idx: expected expert ids in [-1, {E}), got topk_idx[3, 1] = {E}")
    else:
        bad[2, 1] = bad[2, 0] if bad[2, 0] >= 0 else 0
        bad[2, 0] = bad[2, 1]
        expect_error(lambda: buf.dispatch(x, bad, num_experts=E), ValueError,
                     "topk_idx: expected each expert at most once per token, got expert", "twice in topk_idx[2]")
    # Experts that do not split evenly are rejected on every rank.
    expect_error(lambda: buf.dispatch(x, idx, num_experts=E + 1), ValueError,
                 f"num_experts: expected a multiple of the number of ranks ({world}): experts are split evenly, "
                 f"got {E + 1}")
    # A cached handle whose topk_idx changed in place.
    own = idx.clone()
    _, _, _, handle, _ = buf.dispatch(x, own, num_experts=E)
    if rank == 1:
        own[0, 0] = -1
        expect_error(lambda: buf.dispatch(x, handle=handle), ValueError,
                     "handle: expected a handle whose topk_idx is unchanged since its dispatch (a handle replays one "
                     "routing only: dispatch again for a new one), got topk_idx modified in place")
    else:
        expect_error(lambda: buf.dispatch(x, handle=handle), ValueError, "rejected")
    # Wrong dtypes are caught before anything moves.
    expect_error(lambda: buf.dispatch(x.float(), idx, num_experts=E), TypeError, "x: expected dtype torch.bfloat16")
    # ... and after all that the buffer still works, bit-exactly.
    check_case(buf, Case(None, True, False, num_bias=1), rank, world, H, E, M, K, seed=3)
    buf.destroy()
    expect_error(lambda: buf.dispatch(x, idx, num_experts=E), RuntimeError, "destroyed")
    return True


def _mismatched_shapes(rank, world):
    import deep_ep
    hidden = H if rank == 0 else 2 * H
    # Explicit num_bytes: the windows agree in size, so only the shape check can catch it.
    return expect_error(lambda: deep_ep.EPBuffer(dist.group.WORLD, num_bytes=1 << 20, num_max_tokens_per_rank=M,
                                                 hidden=hidden, num_topk=K, explicitly_destroy=True,
                                                 num_cpu_timeout_secs=30),
                        ValueError, "every rank must pass the same (num_max_tokens_per_rank, hidden)",
                        f"rank 0: ({M}, {H})", f"rank 1: ({M}, {2 * H})")


def test_bad_inputs_and_mismatched_shapes_raise_on_every_rank():
    """Bad call arguments (the buffer survives them, bit-exact after), then ranks that build a buffer with
    different shapes (refused at construction on every rank with the same message): one spawn."""
    outs = run_ranks(in_sequence, 2, (_bad_inputs,), (_mismatched_shapes,), timeout=180)
    assert [bad for bad, _ in outs] == [True, True]
    assert outs[0][1] == outs[1][1]


def _timeout(rank, world):
    import deep_ep
    from deepjit.symm import PeerAbortedError, PeerTimeoutError
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                           explicitly_destroy=True, num_cpu_timeout_secs=1)
    idx, _ = refs.make_routing(M, K, E, seed=rank)
    x = refs.make_x(M, H, seed=rank)
    start = time.monotonic()
    if rank == 1:
        time.sleep(3)  # misses rank 0's deadline
        msg = expect_error(lambda: buf.dispatch(x, idx, num_experts=E), PeerAbortedError, "aborted")
    else:
        msg = expect_error(lambda: buf.dispatch(x, idx, num_experts=E), PeerTimeoutError, "timed out", "local rank 1")
    elapsed = time.monotonic() - start
    expect_error(lambda: buf.dispatch(x, idx, num_experts=E), deep_ep.BufferBrokenError, "destroy it")
    buf.destroy()
    dist.barrier()
    # A recreated buffer starts clean.
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                           explicitly_destroy=True, num_cpu_timeout_secs=30)
    check_case(buf, Case("float", True, True, 128, zero_padding=True, num_bias=2), rank, world, H, E, M, K, seed=4)
    buf.destroy()
    return msg, elapsed


def test_timeout_raises_on_every_rank_and_a_new_buffer_is_clean():
    (msg0, t0), (msg1, t1) = run_ranks(_timeout, 2, timeout=120)
    assert t0 < 5 and t1 < 6


def _killed(rank, world, result_dir):
    import deep_ep
    with open(os.path.join(result_dir, f"pid{rank}"), "w") as f:
        f.write(str(os.getpid()))
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                           explicitly_destroy=True, num_cpu_timeout_secs=60)
    idx, _ = refs.make_routing(M, K, E * world // 2, seed=rank)
    x = refs.make_x(M, H, seed=rank)
    if rank == world - 1:
        # Dies after writing its tokens into the peers, before announcing them.
        buf._session.transport.finish_send = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    record_outcome(result_dir, rank, lambda: buf.dispatch(x, idx, num_experts=E * world // 2))


def test_killed_peer_mid_dispatch(tmp_path):
    with pytest.raises(RankFailure) as info:
        run_ranks(_killed, 3, str(tmp_path), timeout=60)
    assert_live_ranks_failed(tmp_path, info.value, (0, 1), 10, ("PeerDiedError", "PeerAbortedError"))
    assert "local rank 2" in (tmp_path / "rank0").read_text() + (tmp_path / "rank1").read_text()
    # Window names carry the creating leader's pid; none of these ranks may leave one behind.
    for rank in range(3):
        pid = (tmp_path / f"pid{rank}").read_text()
        assert glob.glob(f"/dev/shm/dj-symm-deep_ep-{pid}-*") == [], "no shared-memory names may outlive the ranks"


def test_buffer_size_hint_and_alignment_getters():
    import deep_ep

    class G:
        def size(self):
            return 4
    hint = deep_ep.get_buffer_size_hint(G(), 4096, 7168, 8, True)
    assert hint % deep_ep.get_num_allocation_alignment() == 0
    assert hint >= 4 * 4096 * (7168 + 14336 // 2)  # room for four blocks of 4096 FP8 tokens
    assert deep_ep.get_num_tma_alignment() == 32 and deep_ep.topk_idx_t == torch.int64
