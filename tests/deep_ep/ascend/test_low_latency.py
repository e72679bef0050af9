"""V1 low-latency mode with ``EP_BACKEND=ascend`` (deep_ep/ascend/low_latency.py) over its default
transport (the symmetric window on the twin): fixed-size outputs (``[E_local, R * M]`` rows per expert,
whatever the routing); bit-exact against the all-gather oracle of tests/deep_ep/test_low_latency.py on 3
ranks (BF16, FP8 cast fused into the pack with FP32 and power-of-two scales, the weighted combine in slot
order); shrink masks, which need the window (test_ll_symm.py), are refused over the collectives
(``EP_ASCEND_TRANSPORT=hccl``; test_ll_symm.py compares the two transports bit for bit)."""
import torch.distributed as dist

from tests.testkit.distributed import environ, run_ranks

from ..faults import expect_error
from ..test_low_latency import LH, LM, _buffer, _oracle_exact


def _fixed_sizes(rank, world):
    import torch

    import deep_ep
    from deep_ep.ascend.low_latency import AscendLowLatencyEngine
    E = 4 * world
    buf = _buffer(world, E)
    assert isinstance(buf._ll, AscendLowLatencyEngine) and buf._ll.window is not None   # the default on the twin
    shapes = []
    for tokens in (LM, 1):  # a full and an almost empty step have the same output shapes
        idx = torch.full((tokens, 2), -1, dtype=torch.int64)
        idx[:, 0] = torch.arange(tokens) % E
        recv, count, handle, _, _ = buf.low_latency_dispatch(torch.ones(tokens, LH, dtype=torch.float32).bfloat16(), idx, LM, E,
                                                             use_fp8=False)
        shapes.append((tuple(recv.shape), tuple(handle[0].shape)))
    # One combine check for both engines (engine/checks.py): a routing other than the dispatch's is
    # refused on the rank that passed it, and the others learn which rank refused.
    other = idx.clone()
    if rank == 1:
        other[0, 0] = (other[0, 0] + 1) % E
    weights = torch.ones(idx.shape, dtype=torch.float32)
    expect_error(lambda: buf.low_latency_combine(recv, other, weights, handle), ValueError,
                 "topk_idx: expected the one given to the low_latency_dispatch that made the handle" if rank == 1 else "rank 1 rejected")
    buf.destroy()
    assert shapes[0] == shapes[1] == ((E // world, world * LM, LH), (E // world, world * LM)), shapes
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(LM, LH, world, E)
    with environ(EP_ASCEND_TRANSPORT="hccl"):
        expect_error(lambda: deep_ep.Buffer(dist.group.WORLD, 0, hint, low_latency_mode=True, enable_shrink=True),
                     ValueError, "enable_shrink: expected False on the Ascend engine without the symmetric window (the "
                     "rank mask lives in the low-latency symmetric window; all_to_all collectives cannot leave a rank "
                     "out; enable_shrink needs ranks that share symmetric memory and EP_ASCEND_TRANSPORT auto or "
                     "symm, not hccl), got True")
    dist.barrier()
    return _oracle_exact(rank, world)


def test_low_latency_fixed_sizes_and_bit_exact_on_three_ranks():
    assert run_ranks(_fixed_sizes, 3, timeout=900, env={"EP_BACKEND": "ascend"}) == [True] * 3


def _two_in_flight(rank, world):
    """Upstream's overlap pattern: dispatch mb0, dispatch mb1, then hook0, hook1; each micro-batch
    must unpack its own tokens, though the receive staging is one buffer per name (the next
    operation's start runs the pending hook first, engine/session.py ``drain``)."""
    import torch

    from .. import refs
    from ..test_low_latency import K, _expert_output, _gather
    E = 4 * world
    e_local = E // world
    buf = _buffer(world, E)
    batches = []
    for mb in range(2):
        T = LM - rank - mb
        idx, w = refs.make_routing(T, K, E, seed=90 + 10 * mb + rank, masked_ratio=0.2)
        x = refs.make_x(T, LH, seed=90 + 10 * mb + rank)
        batches.append((x, idx, w, buf.low_latency_dispatch(x, idx, LM, E, use_fp8=False, return_recv_hook=True)))
    for *_, (_, _, _, _, hook) in batches:
        hook()
    for x, idx, w, (recv, count, handle, _, _) in batches:
        all_x, all_idx = _gather(x), _gather(idx)
        y = torch.zeros(e_local, world * LM, LH, dtype=torch.bfloat16)
        for e in range(e_local):
            expert, begin = rank * e_local + e, 0
            for src in range(world):
                tokens = (all_idx[src] == expert).any(1).nonzero().squeeze(1)
                n = tokens.numel()
                assert torch.equal(recv[e, begin:begin + n], all_x[src][tokens])
                assert torch.equal(handle[0][e, begin:begin + n], tokens.int())
                y[e, begin:begin + n] = _expert_output(all_x[src][tokens], expert)
                begin += n
            assert int(count[e]) == begin
        combined, _, _ = buf.low_latency_combine(y, idx, w, handle)
        # LogFMT is a wire format of the shared-memory engine: over HCCL the rows stay BF16 (README)
        assert torch.equal(buf.low_latency_combine(y, idx, w, handle, use_logfmt=True)[0], combined)
        expected = torch.zeros(x.shape[0], LH, dtype=torch.float32)
        for k in range(K):
            for t in range(x.shape[0]):
                if idx[t, k] >= 0:
                    expected[t] = expected[t] + w[t, k] * _expert_output(x[t], int(idx[t, k])).float()
        assert torch.equal(combined, expected.bfloat16())
    buf.destroy()
    return True


def test_low_latency_two_dispatches_in_flight_unpack_their_own_tokens():
    assert run_ranks(_two_in_flight, 2, timeout=600, env={"EP_BACKEND": "ascend"}) == [True] * 2
