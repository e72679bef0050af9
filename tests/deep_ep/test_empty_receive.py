"""A rank that receives no token at all (every token routed to another rank's experts): dispatch
hands it empty outputs and combine still returns every token, on the host engine (shared memory) and
the Ascend engine (its default symmetric window, and its collectives)."""
import pytest
import torch
import torch.distributed as dist

from tests.testkit.distributed import run_ranks


def _all_to_rank0(rank, world, window):
    import deep_ep
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=8, hidden=32, num_topk=2,
                           explicitly_destroy=True, num_cpu_timeout_secs=60)
    if window is not None:   # the Ascend engine took the transport the case names
        assert (buf._engine.symm is not None) == window, buf._engine.symm
    # 4 experts, 2 per rank: experts 0 and 1 live on rank 0, so rank 1 receives nothing.
    idx = torch.tensor([[0, 1], [1, 0], [0, -1], [1, -1], [0, 1]], dtype=torch.int64)
    x = (torch.arange(5, dtype=torch.float32)[:, None] + 10 * rank + 1).expand(5, 32).bfloat16()
    for expand in (False, True):
        recv_x, _, _, handle, _ = buf.dispatch(x, idx, num_experts=4, do_expand=expand)
        if rank == 1:
            assert recv_x.shape[0] == 0, recv_x.shape
        else:
            assert recv_x.shape[0] == (16 if expand else 10)
        combined, _, _ = buf.combine(recv_x, handle)
        # Token-major: one row per (token, rank), reduced once; expanded: one row per top-k slot.
        slots = (idx >= 0).sum(1, keepdim=True).float() if expand else torch.ones(5, 1)
        assert torch.equal(combined, (x.float() * slots).bfloat16()), (rank, expand)
    buf.destroy()
    return True


@pytest.mark.parametrize("env, window, timeout", [({}, None, 120),
                                                  ({"EP_BACKEND": "ascend", "EP_ASCEND_TRANSPORT": "hccl"}, False, 600),
                                                  ({"EP_BACKEND": "ascend"}, True, 600)],
                         ids=["default", "ascend-hccl", "ascend-window"])
def test_rank_without_tokens_gets_empty_outputs(env, window, timeout):
    """``ascend-hccl``: the NPU engine's collectives over gloo, its kernels on the Ascend twin (zero-row splits
    in every all-to-all); ``ascend-window``: the same engine over its default symmetric window (zero-row
    exchanges)."""
    assert run_ranks(_all_to_rank0, 2, window, timeout=timeout, env=env) == [True, True]
