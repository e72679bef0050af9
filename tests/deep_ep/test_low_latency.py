"""V1 low-latency mode over shared memory (one host-kernel call per dispatch and per combine):
bit-exact against an oracle built from all-gathered inputs, on 3 ranks; rejected arguments raise on
every rank and the buffer keeps working; a timeout or a dead peer raises on every live rank; with
enable_shrink a failed rank is masked (automatically on timeout, or by hand) and skipped."""
import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from tests.testkit.distributed import RankFailure, in_sequence, run_ranks

from . import refs
from .faults import expect_error, read_outcome, record_outcome

LM, LH, K = 12, 256, 4


def _buffer(world, num_experts, group=None):
    import deep_ep
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(LM, LH, world, num_experts)
    return deep_ep.Buffer(group or dist.group.WORLD, 0, hint, low_latency_mode=True, explicitly_destroy=True)


def _expert_output(x_src: torch.Tensor, expert: int) -> torch.Tensor:
    """Synthetic expert output of a received token: depends only on the token and the expert."""
    return (x_src.float() * (1.0 + expert / 8.0)).bfloat16()


def _gather(t):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, t)
    return out


def _oracle_exact(rank, world, group=None, device="cpu"):
    """``group`` (gloo's WORLD by default) and its ``device``; the oracle on CPU copies."""
    from deep_ep.utils.math import per_token_cast_to_fp8

    from .cases import on
    E = 4 * world
    e_local = E // world
    buf = _buffer(world, E, group)
    T = LM - rank  # uneven token counts
    idx, w = refs.make_routing(T, K, E, seed=70 + rank, masked_ratio=0.2)
    x = refs.make_x(T, LH, seed=70 + rank)
    all_x, all_idx = _gather(x), _gather(idx)
    for use_fp8, round_scale in ((False, False), (True, False), (True, True)):
        stats = torch.full((e_local,), 5, dtype=torch.int32, device=device)
        recv, count, handle, _, _ = buf.low_latency_dispatch(*on(device, (x, idx)), LM, E, stats, use_fp8=use_fp8,
                                                             round_scale=round_scale)
        assert not use_fp8 or recv[1].stride(1) == 1  # scales token-contiguous, as upstream
        recv, count, src_info, layout_range = on("cpu", (recv, count, handle[0], handle[1]))
        y = torch.zeros(e_local, world * LM, LH, dtype=torch.bfloat16)
        for e in range(e_local):
            expert = rank * e_local + e
            begin = 0
            for src in range(world):
                tokens = (all_idx[src] == expert).any(1).nonzero().squeeze(1)
                n = tokens.numel()
                assert int(layout_range[e, src]) == (begin << 32 | n)
                assert torch.equal(src_info[e, begin:begin + n], tokens.int())
                if use_fp8:
                    q, sf = per_token_cast_to_fp8(all_x[src][tokens], use_ue8m0=round_scale)
                    assert torch.equal(recv[0][e, begin:begin + n].view(torch.uint8), q.view(torch.uint8))
                    assert torch.equal(recv[1][e, begin:begin + n], sf)
                else:
                    assert torch.equal(recv[e, begin:begin + n], all_x[src][tokens])
                y[e, begin:begin + n] = _expert_output(all_x[src][tokens], expert)
                begin += n
            assert int(count[e]) == begin and int(stats[e]) == begin + 5
            assert bool((src_info[e, begin:] == -1).all())
        combined, _, _ = buf.low_latency_combine(*on(device, (y, idx, w)), handle)
        combined = combined.cpu()
        # FP32 from zero, slot order, weight times the BF16 expert output, one rounding.
        expected = torch.zeros(T, LH, dtype=torch.float32)
        for k in range(K):
            for t in range(T):
                if idx[t, k] >= 0:
                    expected[t] = expected[t] + w[t, k] * _expert_output(x[t], int(idx[t, k])).float()
        assert torch.equal(combined, expected.bfloat16()), (use_fp8, round_scale)
    buf.destroy()
    return True


def test_low_latency_bit_exact_and_shrink_on_three_ranks():
    """Bit-exact against the oracle, then a shrink that masks a failed rank, in the same three ranks."""
    assert run_ranks(in_sequence, 3, (_oracle_exact,), (_shrink,), timeout=180) == [[True, True]] * 3


def _rejections(rank, world):
    E = 8
    buf = _buffer(world, E)
    idx, w = refs.make_routing(LM, K, E, seed=80 + rank)
    x = refs.make_x(LM, LH, seed=80 + rank)
    recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, LM, E, use_fp8=False)
    good, _, _ = buf.low_latency_combine(recv, idx, w, handle)

    hidden = LH if rank == 0 else LH // 2
    expect_error(lambda: buf.low_latency_dispatch(refs.make_x(LM, hidden, 1), idx, LM, E), ValueError,
            "ranks disagree", "hidden")
    bad = idx.clone()
    bad[2, 1] = E if rank == 0 else bad[2, 1]
    expect_error(lambda: buf.low_latency_dispatch(x, bad, LM, E), ValueError,
            "topk_idx: expected expert ids in [-1, 8), got topk_idx[2, 1] = 8" if rank == 0 else "rank 0 rejected")
    many = LM + 3 if rank == 1 else LM
    expect_error(lambda: buf.low_latency_dispatch(refs.make_x(many, LH, 2), refs.make_routing(many, K, E, 3)[0], LM, E),
            ValueError, f"x: expected at most num_max_dispatch_tokens_per_rank ({LM}) tokens, got {LM + 3} tokens"
            if rank == 1 else "rank 1 rejected")
    other = idx.roll(1, 0) if rank == 1 else idx
    expect_error(lambda: buf.low_latency_combine(recv, other, w, handle), ValueError,
            "topk_idx: expected the one given to the low_latency_dispatch that made the handle" if rank == 1 else "rank 1 rejected")
    expect_error(lambda: buf.low_latency_update_mask_buffer(0, True), ValueError,
                 "enable_shrink: expected True at construction for the low-latency mask, got False")
    # The buffer still works and gives the same result, also after a normal dispatch and combine
    # on the same region (the low-latency kernels then first meet the peers at a barrier).
    recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, LM, E, use_fp8=False)
    again, _, _ = buf.low_latency_combine(recv, idx, w, handle)
    assert torch.equal(again, good)
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, E)
    nx, _, nw, _, nhandle, _ = buf.dispatch(x, None, per_rank, None, in_rank, per_expert, idx, w)
    summed, _, _ = buf.combine(nx, nhandle)
    assert torch.equal(summed, (x.float() * in_rank.sum(1, keepdim=True)).bfloat16())
    recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, LM, E, use_fp8=False)
    again, _, _ = buf.low_latency_combine(recv, idx, w, handle)
    assert torch.equal(again, good)
    buf.destroy()
    return True


def test_low_latency_rejections_raise_on_every_rank():
    assert run_ranks(_rejections, 2, timeout=120) == [True, True]


def _timeout(rank, world):
    import deep_ep
    from deepjit.symm import PeerAbortedError, PeerTimeoutError
    E = 8
    buf = _buffer(world, E)
    buf._ep._session.transport.window.timeout_s = 1.0  # V1 Buffer has no timeout argument
    idx, _ = refs.make_routing(LM, K, E, seed=rank)
    x = refs.make_x(LM, LH, seed=rank)
    start = time.monotonic()
    if rank == 1:
        time.sleep(3)
        expect_error(lambda: buf.low_latency_dispatch(x, idx, LM, E), PeerAbortedError, "aborted")
    else:
        expect_error(lambda: buf.low_latency_dispatch(x, idx, LM, E), PeerTimeoutError, "timed out", "local rank 1")
    elapsed = time.monotonic() - start
    expect_error(lambda: buf.low_latency_dispatch(x, idx, LM, E), deep_ep.BufferBrokenError, "destroy it")
    buf.destroy()
    return elapsed


def test_low_latency_timeout_raises_on_every_rank():
    t0, t1 = run_ranks(_timeout, 2, timeout=60)
    assert t0 < 5 and t1 < 6


def _killed(rank, world, result_dir):
    E = 4 * world
    buf = _buffer(world, E)
    idx, w = refs.make_routing(LM, K, E, seed=rank)
    x = refs.make_x(LM, LH, seed=rank)
    recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, LM, E, use_fp8=False)
    if rank == world - 1:
        os.kill(os.getpid(), signal.SIGKILL)  # dies before the combine's round
    record_outcome(result_dir, rank, lambda: buf.low_latency_combine(recv, idx, w, handle))


def test_low_latency_dead_peer_raises_on_every_live_rank(tmp_path):
    with pytest.raises(RankFailure):
        run_ranks(_killed, 3, str(tmp_path), timeout=60)
    for rank in (0, 1):
        seconds, outcome = read_outcome(tmp_path, rank)
        assert seconds < 10, outcome
        assert outcome.startswith(("PeerDiedError", "PeerAbortedError")), outcome


def _shrink(rank, world):
    import deep_ep
    E = 4 * world
    e_local = E // world
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(LM, LH, world, E)
    buf = deep_ep.Buffer(dist.group.WORLD, 0, hint, low_latency_mode=True, explicitly_destroy=True,
                         enable_shrink=True)
    idx, w = refs.make_routing(LM, K, E, seed=90 + rank, masked_ratio=0.1)
    x = refs.make_x(LM, LH, seed=90 + rank)
    all_x, all_idx = _gather(x), _gather(idx)
    recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, LM, E, use_fp8=False)
    buf.low_latency_combine(recv, idx, w, handle)
    dead = world - 1
    if rank == dead:  # stops taking part, as a failed rank would
        time.sleep(3)
        buf.destroy()
        return True
    buf._ep._session.transport.window.timeout_s = 1.0  # V1 Buffer has no timeout argument
    mask = torch.empty(world, dtype=torch.int32)
    expect_error(lambda: buf.low_latency_query_mask_buffer(torch.empty(world, dtype=torch.float32)), ValueError,
                 f"mask_status: expected an int32 tensor of shape ({world},), got torch.float32 ({world},)")
    expect_error(lambda: buf.low_latency_update_mask_buffer(rank, True), ValueError,
                 f"rank: expected another rank than this one ({rank}) with mask=True: a rank cannot mask itself, "
                 f"got {rank}")
    expect_error(lambda: buf.low_latency_update_mask_buffer(world, True), ValueError, f"rank: expected an int in [0, {world}), got {world}")
    for manual in (False, True):
        if manual:
            buf.low_latency_clean_mask_buffer()
            buf.low_latency_query_mask_buffer(mask)
            assert mask.tolist() == [0] * world
            buf.low_latency_update_mask_buffer(dead, True)
        start = time.monotonic()
        recv, count, handle, _, _ = buf.low_latency_dispatch(x, idx, LM, E, use_fp8=False)
        assert manual is False or time.monotonic() - start < 0.5  # a masked rank is not waited for
        buf.low_latency_query_mask_buffer(mask)
        assert mask.tolist() == [int(r == dead) for r in range(world)]  # timed out: masked automatically
        y = torch.zeros(e_local, world * LM, LH, dtype=torch.bfloat16)
        for e in range(e_local):
            expert, begin = rank * e_local + e, 0
            for src in range(dead):  # the masked rank's tokens are not received
                tokens = (all_idx[src] == expert).any(1).nonzero().squeeze(1)
                n = tokens.numel()
                assert torch.equal(recv[e, begin:begin + n], all_x[src][tokens])
                y[e, begin:begin + n] = _expert_output(all_x[src][tokens], expert)
                begin += n
            assert int(count[e]) == begin and int(handle[1][e, dead]) & 0xFFFFFFFF == 0
        combined, _, _ = buf.low_latency_combine(y, idx, w, handle)
        expected = torch.zeros(LM, LH, dtype=torch.float32)
        for k in range(K):
            for t in range(LM):
                e = int(idx[t, k])
                if e >= 0 and e // e_local != dead:  # the masked rank's experts add nothing
                    expected[t] = expected[t] + w[t, k] * _expert_output(x[t], e).float()
        assert torch.equal(combined, expected.bfloat16()), manual
    buf.destroy()
    return True


def _fuzz_ids(rank, world):
    """One rank (the kernels with R = 1): fuzzed expert ids are rejected with the slot named, or
    dispatched with counts that match a bincount; bad argument shapes name the argument."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    E = 8
    buf = _buffer(world, E)

    @settings(max_examples=25, deadline=None)
    @given(st.integers(1, LM), st.integers(1, 6), st.integers(-4, 12), st.data())
    def check(T, k_width, bad_value, data):
        g = torch.Generator().manual_seed(T * 10 + k_width)
        idx = torch.stack([torch.randperm(E, generator=g)[:k_width] for _ in range(T)])
        t, k = data.draw(st.integers(0, T - 1)), data.draw(st.integers(0, k_width - 1))
        idx[t, k] = bad_value
        x = refs.make_x(T, LH, seed=T)
        row = idx[t].tolist()
        if bad_value < -1 or bad_value >= E:
            expect_error(lambda: buf.low_latency_dispatch(x, idx, LM, E), ValueError,
                         f"topk_idx: expected expert ids in [-1, {E}), got topk_idx[{t}, {k}] = {bad_value}")
        elif bad_value >= 0 and row.count(bad_value) > 1:
            expect_error(lambda: buf.low_latency_dispatch(x, idx, LM, E), ValueError,
                         f"topk_idx: expected each expert at most once per token, got expert {bad_value} twice in "
                         f"topk_idx[{t}]")
        else:
            _, count, _, _, _ = buf.low_latency_dispatch(x, idx, LM, E)
            assert torch.equal(count, torch.bincount(idx[idx >= 0], minlength=E).int())

    check()
    x, idx = refs.make_x(4, LH, seed=1), refs.make_routing(4, K, E, seed=1)[0]
    want_idx = "topk_idx: expected int64 of shape (4, num_topk <= 64) on cpu, got "
    for bad_call, fragment in ((lambda: buf.low_latency_dispatch(x, idx.int(), LM, E), f"{want_idx}torch.int32 (4, {K})"),
                               (lambda: buf.low_latency_dispatch(x, idx[:3], LM, E), f"{want_idx}torch.int64 (3, {K})"),
                               (lambda: buf.low_latency_dispatch(x, idx, LM, 0),
                                f"num_experts: expected a positive multiple of the number of ranks ({world}), got 0"),
                               (lambda: buf.low_latency_dispatch(x, idx, LM, E, torch.zeros(3, dtype=torch.int32)),
                                f"cumulative_local_expert_recv_stats: expected a contiguous int32 tensor of shape "
                                f"({E // world},) on cpu, got torch.int32 (3,)"),
                               (lambda: buf.low_latency_dispatch(refs.make_x(4, 200, 1), idx, LM, E),
                                "x: expected a hidden size that is a multiple of 128 and at most 32768, got hidden 200")):
        expect_error(bad_call, ValueError, fragment)
    # combine with an equal but strided topk_idx (a transposed copy) gives the same result
    w = torch.rand(4, K, dtype=torch.float32)
    recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, LM, E, use_fp8=False)
    good, _, _ = buf.low_latency_combine(recv, idx, w, handle)
    strided = idx.T.contiguous().T
    assert not strided.is_contiguous()
    again, _, _ = buf.low_latency_combine(recv, strided, w, handle)
    assert torch.equal(again, good)
    buf.destroy()
    return True


def test_low_latency_fuzzed_ids_and_arguments():
    assert run_ranks(_fuzz_ids, 1, timeout=120) == [True]
