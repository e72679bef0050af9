"""The V1 ``Buffer`` normal kernels as upstream's callers see them: the handle is upstream's
intranode tuple, a cached dispatch returns None in the handle slot, dispatch without top-k returns
per-expert counts from ``num_tokens_per_expert``, a ``num_worst_tokens`` overflow raises, and a
batch larger than the buffer holds is dispatched in chunks with the same results."""
import torch
import torch.distributed as dist

from tests.testkit.distributed import run_ranks

from . import refs

H, E, K = 256, 16, 4
# Slot and combine row of hidden 256 / top-4 take 576 bytes each: 16 tokens per rank per pass at 2 ranks.
SMALL_BYTES = (64 << 10) + 2 * 576 * 16


def _all_gather(t):
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return torch.stack(out)


def _check_dispatch(buf, rank, world, T, seed):
    M = 64  # the oracle's num_max_tokens_per_rank, for src_token_global_idx
    idx, w = refs.make_routing(T, K, E, seed=seed + rank)
    x = refs.make_x(T, H, seed=seed + rank)
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, E)
    recv_x, recv_idx, recv_w, counts, handle, _ = buf.dispatch(x, None, per_rank, None, in_rank, per_expert, idx, w)
    ref = refs.dispatch(x, None, idx, w, E, M)
    assert torch.equal(recv_x, ref["x"]) and torch.equal(recv_idx, ref["topk_idx"]) and torch.equal(recv_w, ref["weights"])
    assert counts == [int((ref["topk_idx"] == e).sum()) for e in range(E // world)]

    # The handle: upstream's six-tuple.
    assert isinstance(handle, tuple) and len(handle) == 6
    rank_prefix, channel_prefix, recv_channel_prefix, recv_src_idx, is_token_in_rank, send_head = handle
    sent = _all_gather(per_rank.int())                       # [source, destination]
    assert torch.equal(rank_prefix, torch.cumsum(sent, 0).int())
    assert torch.equal(channel_prefix[:, 0], per_rank.int())
    recv = sent[:, rank]
    assert torch.equal(recv_channel_prefix[:, 0], (torch.cumsum(recv, 0) - recv).int())
    assert is_token_in_rank is in_rank
    assert torch.equal(recv_src_idx, (ref["src"] % M).int()), (recv_src_idx, ref["src"] % M)
    expect_head = torch.where(in_rank, torch.cumsum(in_rank.int(), 0) - 1, -1).int()
    assert torch.equal(send_head, expect_head)
    # Upstream's test: the rows of source i are rank_prefix[i - 1, rank] .. rank_prefix[i, rank].
    for i in range(world):
        begin = 0 if i == 0 else int(rank_prefix[i - 1, rank])
        assert torch.equal(recv_src_idx[begin:int(rank_prefix[i, rank])].long() + i * M, ref["src"][
            (ref["src"] // M == i).nonzero().squeeze(1)])

    # Combine of the received rows: x times the number of ranks holding it (exact in FP32), and
    # the weights back (each slot's weight is held by one rank, zero elsewhere).
    combined, combined_w, _ = buf.combine(recv_x, handle, recv_w)
    assert torch.equal(combined, (x.float() * in_rank.sum(1, keepdim=True)).bfloat16())
    assert torch.equal(combined_w, w)

    # Cached: same rows, None where upstream returns None (the handle slot included).
    cached = buf.dispatch(x, handle)
    assert torch.equal(cached[0], recv_x) and cached[1:5] == (None, None, None, None)
    return x, idx, w, per_rank, per_expert, in_rank, recv_x, handle


def _v1_parity(rank, world):
    import deep_ep
    buf = deep_ep.Buffer(dist.group.WORLD, deep_ep.Config().get_nvl_buffer_size_hint(H * 2, world),
                         explicitly_destroy=True)
    T = 40 - 5 * rank
    x, idx, w, per_rank, per_expert, in_rank, recv_x, _ = _check_dispatch(buf, rank, world, T, 10)

    # Without top-k: rows by is_token_in_rank, per-expert counts from the senders' num_tokens_per_expert.
    rx, ridx, rw, counts, _, _ = buf.dispatch(x, None, per_rank, None, in_rank, per_expert, expert_alignment=4)
    assert ridx is None and rw is None and rx.shape[0] == int(_all_gather(per_rank)[:, rank].sum())
    got = _all_gather(per_expert.int())[:, rank * (E // world):(rank + 1) * (E // world)].sum(0)
    assert counts == [-(-int(c) // 4) * 4 for c in got] and sum(counts) > 0

    # num_worst_tokens below what some rank receives: every rank raises.
    most = int(_all_gather(per_rank.int()).sum(0).max())
    try:
        buf.dispatch(x, None, per_rank, None, in_rank, per_expert, idx, w, num_worst_tokens=most - 1)
        raise AssertionError("num_worst_tokens overflow was not reported")
    except ValueError as e:
        assert "num_worst_tokens" in str(e)
    wx, _, _, wcounts, whandle, _ = buf.dispatch(x, None, per_rank, None, in_rank, per_expert, idx, w,
                                                 num_worst_tokens=most)
    assert wx.shape[0] == most and wcounts == [] and torch.equal(wx[:recv_x.shape[0]], recv_x)
    buf.destroy()

    # A buffer of 16 tokens per pass and batches of 40 and 35 tokens: three chunks, same results.
    small = deep_ep.Buffer(dist.group.WORLD, SMALL_BYTES, explicitly_destroy=True)
    assert small._capacity(H, 2, 0, K) == 16
    _check_dispatch(small, rank, world, T, 20)
    small.destroy()
    return True


def test_v1_normal_matches_upstream_surface():
    assert run_ranks(_v1_parity, 2, timeout=180) == [True, True]
