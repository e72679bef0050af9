"""The V1 ``Buffer`` facade (normal and low-latency kernels), the V2.1 ``ElasticBuffer`` and the
asynchronous modes (background comm worker, deferred epilogues, previous events)."""
import torch
import torch.distributed as dist

from tests.testkit.distributed import in_sequence, run_ranks
from tests.testkit.numerics import calc_diff

from . import refs

H, E, M, K = 256, 16, 40, 4


def _shifted_diff(x, y):
    """Upstream's check: calc_diff on x + 1 and y + 1 (float64)."""
    return calc_diff(x.double() + 1, y.double() + 1)


def _v1_normal(rank, world):
    import deep_ep
    buf = deep_ep.Buffer(dist.group.WORLD, deep_ep.Config().get_nvl_buffer_size_hint(H * 2, world),
                         explicitly_destroy=True)
    T = M - 5 * rank
    idx, w = refs.make_routing(T, K, E, seed=10 + rank)
    x = refs.make_x(T, H, seed=10 + rank)
    per_rank, per_rdma, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, E)
    owner = torch.where(idx >= 0, idx // (E // world), -1)
    expect_in_rank = torch.stack([(owner == r).any(1) for r in range(world)], 1)
    assert per_rdma is None and torch.equal(in_rank, expect_in_rank)
    assert torch.equal(per_rank, expect_in_rank.sum(0).int())
    assert torch.equal(per_expert, torch.stack([(idx == e).sum() for e in range(E)]).int())

    recv_x, recv_idx, recv_w, counts, handle, _ = buf.dispatch(x, None, per_rank, None, in_rank, per_expert, idx, w,
                                                               expert_alignment=4)
    ref = refs.dispatch(x, None, idx, w, E, M)
    assert torch.equal(recv_x, ref["x"]) and torch.equal(recv_idx, ref["topk_idx"])
    assert torch.equal(recv_w, ref["weights"])
    assert counts == [-(-int((ref["topk_idx"] == e).sum()) // 4) * 4 for e in range(E // world)]
    total = per_rank.clone()
    dist.all_reduce(total)
    assert recv_x.shape[0] == int(total[rank])

    combined, combined_w, _ = buf.combine(recv_x, handle, recv_w)
    copies = expect_in_rank.sum(1, keepdim=True).clamp(min=1)
    assert _shifted_diff(combined.float() / copies, x.float()) < 5e-6
    assert torch.allclose(combined_w, w)

    cached, none_idx, none_w, none_counts, none_handle, _ = buf.dispatch(x, handle)
    assert torch.equal(cached, recv_x) and none_idx is None and none_counts is None and none_handle is None

    worst = T * world
    wx, widx, _, wcounts, whandle, _ = buf.dispatch(x, None, per_rank, None, in_rank, per_expert, idx, w,
                                                    num_worst_tokens=M * world)
    n = recv_x.shape[0]
    assert wx.shape[0] == M * world and wcounts == [] and worst > 0
    assert torch.equal(wx[:n], recv_x) and bool((widx[n:] == -1).all())
    buf.combine(wx, whandle)

    # Routing by rank only (no top-k): each rank gets the tokens flagged for it.
    rx, ridx, rw, _, rhandle, _ = buf.dispatch(x, None, per_rank, None, in_rank, per_expert)
    assert ridx is None and rw is None and rx.shape[0] == int(total[rank])
    # FP8 input with column-major FP32 scales.
    fx = refs.make_x(T, H, seed=20 + rank, fp8="float")
    (fr, fs), *_ = buf.dispatch(fx, None, per_rank, None, in_rank, per_expert, idx, w)
    fref = refs.dispatch(fx[0], fx[1], idx, w, E, M)
    assert torch.equal(fr.view(torch.uint8), fref["x"].view(torch.uint8)) and torch.equal(fs, fref["sf"])
    buf.destroy()
    return True


def _v1_low_latency(rank, world):
    import deep_ep
    from deep_ep.utils.math import per_token_cast_back, per_token_cast_to_fp8
    LM, LH, LE = 16, 512, 8
    buf = deep_ep.Buffer(dist.group.WORLD, 0, deep_ep.Buffer.get_low_latency_rdma_size_hint(LM, LH, world, LE),
                         low_latency_mode=True, explicitly_destroy=True)
    T = LM - rank
    idx, w = refs.make_routing(T, K, LE, seed=30 + rank, masked_ratio=0.2)
    x = refs.make_x(T, LH, seed=30 + rank)
    all_x = [None] * world
    all_idx = [None] * world
    dist.all_gather_object(all_x, x)
    dist.all_gather_object(all_idx, idx)
    e_local = LE // world
    for mode in ("bf16", "fp8", "ue8m0", "hook"):
        stats = torch.zeros(e_local, dtype=torch.int32)
        use_fp8 = mode in ("fp8", "ue8m0")
        recv, count, handle, _, hook = buf.low_latency_dispatch(
            x, idx, LM, LE, stats, use_fp8=use_fp8, round_scale=mode == "ue8m0", use_ue8m0=mode == "ue8m0",
            return_recv_hook=mode == "hook")
        if hook is not None:
            hook()
        src_info, ranges = handle[0], handle[1]
        for e in range(e_local):
            expert = rank * e_local + e
            expected = sum(int((i == expert).sum()) for i in all_idx)
            assert int(count[e]) == expected == int(stats[e])
            for src in range(world):
                begin, n = int(ranges[e, src]) >> 32, int(ranges[e, src]) & 0xFFFFFFFF
                tokens = src_info[e, begin:begin + n].long()
                assert torch.equal(tokens, (all_idx[src] == expert).any(1).nonzero().squeeze(1))
                if use_fp8:
                    fp8, sf = per_token_cast_to_fp8(all_x[src][tokens], use_ue8m0=mode == "ue8m0")
                    assert torch.equal(recv[0][e, begin:begin + n].view(torch.uint8), fp8.view(torch.uint8))
                    if mode == "fp8":
                        assert torch.equal(recv[1][e, begin:begin + n], sf)
                else:
                    assert torch.equal(recv[e, begin:begin + n], all_x[src][tokens])
        # Combine with the (dequantised) received tokens as the expert output: x * sum of weights.
        if use_fp8:
            rx, rsf = recv
            y = torch.stack([per_token_cast_back(rx[e], rsf[e]) for e in range(e_local)]).bfloat16()
        else:
            y = recv
        zero_copy = mode == "bf16"
        if zero_copy:
            buf.get_next_low_latency_combine_buffer(handle).copy_(y)
        out = torch.empty(T, LH, dtype=torch.bfloat16)
        combined, _, _ = buf.low_latency_combine(y, idx, w, handle, zero_copy=zero_copy, out=out)
        assert combined is out and not torch.isnan(combined.float()).any()
        expected = x.float() * w.masked_fill(idx < 0, 0).sum(1, keepdim=True)
        assert _shifted_diff(combined.float(), expected) < (9e-4 if use_fp8 else 1e-5), mode
    buf.destroy()
    return True


def test_v1_normal_and_low_latency():
    assert run_ranks(in_sequence, 2, (_v1_normal,), (_v1_low_latency,), timeout=180) == [[True, True]] * 2


def _async(rank, world):
    import deep_ep
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                           explicitly_destroy=True)
    idx, w = refs.make_routing(M, K, E, seed=40 + rank)
    x = refs.make_x(M, H, seed=40 + rank)
    kw = dict(num_experts=E, do_expand=True, expert_alignment=8, do_zero_padding=True)
    sync_x, _, sync_w, sync_handle, _ = buf.dispatch(x, idx, w, **kw)
    y = (sync_x.float() * sync_w[:, None]).bfloat16()
    sync_out, _, _ = buf.combine(y, sync_handle)

    # Background worker: outputs are complete once the event is waited on.
    ax, _, aw, ahandle, event = buf.dispatch(x, idx, w, async_with_compute_stream=True, **kw)
    event.current_stream_wait()
    assert torch.equal(ax, sync_x) and torch.equal(aw, sync_w)
    out, _, event = buf.combine(y, ahandle, async_with_compute_stream=True, previous_event=buf.capture(),
                                allocate_on_comm_stream=True)
    event.current_stream_wait()
    assert torch.equal(out, sync_out)
    # Deferred epilogues: the event's wait() returns the results.
    event = buf.dispatch(x, idx, w, async_with_compute_stream=True, defer_epilogue=True, **kw)
    dx, _, dw, dhandle = event.wait()
    assert torch.equal(dx, sync_x) and torch.equal(dw, sync_w)
    event = buf.combine(y, dhandle, async_with_compute_stream=True, defer_epilogue=True)
    assert torch.equal(event.wait()[0], sync_out)
    # Outputs the caller keeps pin their shared-memory block; once the arena is full, dispatch falls
    # back to a receive-side copy into private memory. Both give the same bytes.
    arena = buf._session.transport
    kept, inside, fell_back = [], [], torch.zeros(1, dtype=torch.float32)
    while len(kept) < 200 and not bool(fell_back):  # until some rank's output no longer fits (bounded)
        kept.append(buf.dispatch(x, idx, w, **kw))
        inside.append(arena.arena_address(rank) <= kept[-1][0].data_ptr()
                      < arena.arena_address(rank) + arena.arena_bytes)
        dist.all_reduce(fell_back.fill_(float(not inside[-1])), op=dist.ReduceOp.MAX)
    assert inside[0] and bool(fell_back)
    kept.append(buf.dispatch(x, idx, w, **kw))  # the fallback keeps working
    assert all(torch.equal(k[0], sync_x) and torch.equal(k[2], sync_w) for k in kept)
    del kept
    # A deferred epilogue not yet waited on is finished by the next operation, not overwritten.
    first = buf.dispatch(x, idx, w, async_with_compute_stream=True, defer_epilogue=True, **kw)
    buf.barrier()
    assert torch.equal(first.wait()[0], sync_x)
    buf.destroy()

    # ElasticBuffer (V2.1): the handle keeps its own copy of topk_idx by default.
    ebuf = deep_ep.ElasticBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                                 explicitly_destroy=True)
    mine = idx.clone()
    ex, _, _, ehandle, _ = ebuf.dispatch(x, mine, w, **kw)
    assert ehandle.topk_idx.data_ptr() != mine.data_ptr()
    mine.fill_(-1)
    cx = ebuf.dispatch(x, handle=ehandle, do_expand=True)[0]
    assert torch.equal(cx[ehandle.recv_src_metadata[:, 2:][ehandle.recv_src_metadata[:, 2:] >= 0].long()],
                       ex[ehandle.recv_src_metadata[:, 2:][ehandle.recv_src_metadata[:, 2:] >= 0].long()])
    assert torch.equal(ebuf.combine(y, ehandle)[0], sync_out)
    ebuf.destroy()
    return True


def test_async_deferred_and_elastic():
    assert run_ranks(_async, 2, timeout=120) == [True, True]


def _local_buffer(rank, world):
    import deep_ep
    buf = deep_ep.Buffer(dist.group.WORLD, 1 << 20, explicitly_destroy=True)
    whole = buf.get_local_buffer_tensor(torch.bfloat16)
    assert whole.dtype == torch.bfloat16 and whole.numel() == (1 << 20) // 2
    mine = buf.get_local_buffer_tensor(torch.int32, (2, 8), offset=64)
    mine.fill_(100 + rank)
    assert whole.view(torch.uint8)[64:128].view(torch.int32).eq(100 + rank).all()
    dist.barrier()
    # The view is this rank's part of the shared window: the peer reads it from there.
    peer = (rank + 1) % world
    seen = buf._ep._session.transport.region(peer, torch.int32, (2, 8), 64)
    assert bool((seen == 100 + peer).all())
    for bad in (dict(offset=2), dict(size=(1 << 20) // 4 + 1), dict(offset=1 << 21)):
        try:
            buf.get_local_buffer_tensor(torch.int32, **bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} accepted")
    dist.barrier()
    buf.destroy()
    return True


def test_get_local_buffer_tensor_views_the_shared_window():
    assert run_ranks(_local_buffer, 2, timeout=60) == [True, True]
