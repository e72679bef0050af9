"""The V1 ``Buffer`` facade with ``EP_BACKEND=ascend``, through the host path's checks
(tests/deep_ep/test_v1_and_async.py): the normal mode (layout, dispatch with alignment, weights,
cached and worst-case dispatches, rank-only routing, FP8 input, the rank-order combine) and the
low-latency mode on the Ascend low-latency engine (BF16 / FP8, async, receive hooks, zero copy, out)."""
from tests.testkit.distributed import in_sequence, run_ranks

from ..test_v1_and_async import _v1_low_latency, _v1_normal

ENV = {"EP_BACKEND": "ascend"}


def _two_deferred(rank, world):
    """Two deferred dispatches (then two deferred combines) before either epilogue runs: each gets its
    own tokens, though the Ascend engine's receive staging is one buffer per name (the next
    operation's start runs the pending epilogue first, engine/session.py ``drain``)."""
    import torch
    import torch.distributed as dist

    import deep_ep

    from .. import refs
    from ..test_v1_and_async import E, H, K, M
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=H, num_topk=K,
                           explicitly_destroy=True)
    kw = dict(num_experts=E, do_expand=True, expert_alignment=8, do_zero_padding=True)
    batches = []
    for mb in range(2):
        idx, w = refs.make_routing(M - mb, K, E, seed=60 + 10 * mb + rank)
        x = refs.make_x(M - mb, H, seed=60 + 10 * mb + rank)
        sync_x, _, sync_w, handle, _ = buf.dispatch(x, idx, w, **kw)
        y = (sync_x.float() * sync_w[:, None]).bfloat16()
        batches.append((x, idx, w, sync_x, sync_w, y, buf.combine(y, handle)[0]))
    events = [buf.dispatch(x, idx, w, async_with_compute_stream=True, defer_epilogue=True, **kw)
              for x, idx, w, *_ in batches]
    handles = []
    for event, (_, _, _, sync_x, sync_w, *_) in zip(events, batches, strict=True):
        dx, _, dw, handle = event.wait()
        assert torch.equal(dx, sync_x) and torch.equal(dw, sync_w)
        handles.append(handle)
    events = [buf.combine(b[5], h, async_with_compute_stream=True, defer_epilogue=True)
              for b, h in zip(batches, handles, strict=True)]
    for event, b in zip(events, batches, strict=True):
        assert torch.equal(event.wait()[0], b[6])
    buf.destroy()
    return True


def test_v1_normal_low_latency_and_two_deferred_operations_in_flight():
    """One spawn for the three scenarios: each Ascend rank lowers its kernels once, not once per scenario."""
    steps = (_v1_normal,), (_v1_low_latency,), (_two_deferred,)
    assert run_ranks(in_sequence, 2, *steps, timeout=900, env=ENV) == [[True] * 3] * 2
