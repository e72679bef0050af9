"""Upstream-style scenarios (written for this suite, small sizes) for the asynchronous modes:
a V1 ``Buffer.dispatch(async_finish=True)`` with and without ``num_worst_tokens`` (the padded
outputs must hold the received rows once the event is waited on), and an EPBuffer used entirely
under ``torch.inference_mode()`` with async, cached, expanded, zero-padded dispatches (the
epilogue on the comm worker writes into inference tensors)."""
import pytest
import torch
import torch.distributed as dist

from tests.testkit.distributed import in_sequence, run_ranks, with_env

from .. import refs

H, E, M, K = 256, 12, 24, 4


def _v1_async_worst(rank, world):
    import deep_ep
    buf = deep_ep.Buffer(dist.group.WORLD, deep_ep.Config().get_nvl_buffer_size_hint(H * 2, world),
                         explicitly_destroy=True)
    T = M - 3 * rank
    idx, w = refs.make_routing(T, K, E, seed=20 + rank)
    ref = refs.dispatch(refs.make_x(T, H, seed=20 + rank), None, idx, w, E, M)
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, E)
    assert deep_ep.Buffer.is_sm90_compiled(), "FP8 dispatch is available: upstream's tests key their FP8 cases on it"
    for fp8 in (None, "float"):
        x = refs.make_x(T, H, seed=20 + rank, fp8=fp8)
        ref = refs.dispatch(*(x if fp8 else (x, None)), idx, w, E, M)
        args = dict(x=x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                    topk_idx=idx, topk_weights=w, async_finish=True, previous_event=buf.capture())
        recv_x, recv_idx, recv_w, _, handle, event = buf.dispatch(**args)
        event.current_stream_wait()
        n = ref["topk_idx"].shape[0]
        worst = M * world
        wx, widx, ww, counts, _, event = buf.dispatch(**args, num_worst_tokens=worst)
        event.current_stream_wait()
        data, wdata = (recv_x[0], wx[0]) if fp8 else (recv_x, wx)
        assert counts == [] and wdata.shape[0] == widx.shape[0] == ww.shape[0] == worst
        assert torch.equal(data.view(torch.uint8) if fp8 else data, (ref["x"].view(torch.uint8) if fp8 else ref["x"]))
        assert torch.equal(wdata[:n].view(torch.uint8), data.view(torch.uint8)), "padded rows must be the rows"
        if fp8:
            assert torch.equal(wx[1][:n], recv_x[1]) and torch.equal(recv_x[1], ref["sf"])
        assert torch.equal(widx[:n], recv_idx) and torch.equal(ww[:n], recv_w) and bool((widx[n:] == -1).all())
        # A combine of the padded dispatch's handle: back to each token's sum over its ranks.
        combined, _, event = buf.combine(recv_x if not fp8 else recv_x[0].bfloat16(), handle, async_finish=True)
        event.current_stream_wait()
    buf.destroy()
    return True


@pytest.mark.parametrize("world", [2, 3])
def test_v1_async_dispatch_with_worst_tokens_keeps_rows(world):
    assert run_ranks(_v1_async_worst, world, timeout=120) == [True] * world


def _inference(rank, world):
    import deep_ep
    with torch.inference_mode():
        buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                               explicitly_destroy=True)
        idx, w = refs.make_routing(M, K, E, seed=30 + rank)
        x = refs.make_x(M, H, seed=30 + rank)
        kw = dict(num_experts=E, do_expand=True, expert_alignment=8, do_zero_padding=True)
        sync_x, _, sync_w, handle, _ = buf.dispatch(x, idx, w, **kw)
        ax, _, aw, ahandle, event = buf.dispatch(x, idx, w, async_with_compute_stream=True, **kw)
        event.current_stream_wait()
        assert torch.equal(ax, sync_x) and torch.equal(aw, sync_w)
        cx, _, _, _, event = buf.dispatch(x, handle=ahandle, async_with_compute_stream=True, **kw)
        event.current_stream_wait()
        assert torch.equal(cx, sync_x)
        y = (sync_x.float() * sync_w[:, None]).bfloat16()
        sync_out = buf.combine(y, handle)[0]
        out, _, event = buf.combine(y, ahandle, async_with_compute_stream=True)
        event.current_stream_wait()
        assert torch.equal(out, sync_out) and out.is_inference()
        deferred = buf.dispatch(x, handle=ahandle, async_with_compute_stream=True, defer_epilogue=True, **kw)
        assert torch.equal(deferred.wait()[0], sync_x)
        buf.destroy()
        v1 = deep_ep.Buffer(dist.group.WORLD, deep_ep.Config().get_nvl_buffer_size_hint(H * 2, world),
                            explicitly_destroy=True)
        per_rank, _, per_expert, in_rank, _ = v1.get_dispatch_layout(idx, E)
        rx, _, _, _, vh, event = v1.dispatch(x, None, per_rank, None, in_rank, per_expert, idx, w, async_finish=True)
        event.current_stream_wait()
        assert torch.equal(v1.combine(rx, vh, async_finish=True)[0], v1.combine(rx, vh)[0])
        v1.destroy()
    return True


def test_inference_mode_and_low_latency_over_collectives():
    """Inference mode with an async cached zero-padded dispatch; then the V1 low-latency calls over
    collectives (the path between hosts): the packed FP8 scales are token-contiguous as upstream's, and
    every row bit-exact. One spawn."""
    from ..test_low_latency import _oracle_exact
    steps = (_inference,), (with_env, {"EP_TRANSPORT": "dist"}, _oracle_exact)
    assert run_ranks(in_sequence, 2, *steps, timeout=180) == [[True, True]] * 2
