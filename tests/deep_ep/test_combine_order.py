"""The order in which combine adds the receiving ranks' rows, on values where the FP32 addition
order changes the bits: with bias 1, rank 0's partial 2^-24 and rank 1's -1, rank 0 first gives
``(1 + 2^-24) - 1 = 0`` and rank 1 first ``(1 - 1) + 2^-24 = 2^-24``.

V2 (``EPBuffer``; upstream's ``deep_ep/utils/refs.py::combine`` and its epilogue): each rank's
partial is added at that rank's last top-k slot of the token. V1 ``Buffer.combine`` (upstream's
intranode kernel): in ascending rank order."""
import pytest
import torch
import torch.distributed as dist

from tests.testkit.distributed import run_ranks

H, E = 256, 4
TINY = 2.0 ** -24
# Experts 0-1 live on rank 0, 2-3 on rank 1. (routing, V2 result, V1 result)
CASES = [
    ([0, 2, 1], TINY, 0.0),    # ranks 0, 1, 0: last slots order rank 1 before rank 0 (first slots: 0, 1)
    ([2, 0, -1], TINY, 0.0),   # ranks 1, 0
    ([2, 3, 0], TINY, 0.0),    # ranks 1, 1, 0
    ([0, 2, 3], 0.0, 0.0),     # ranks 0, 1, 1
]


def _rank_value(rank):
    return TINY if rank == 0 else -1.0


def _orders(rank, world):
    import deep_ep
    idx = torch.tensor([c[0] for c in CASES], dtype=torch.int64)
    T, K = idx.shape
    x = torch.zeros(T, H, dtype=torch.bfloat16)
    bias = torch.ones(T, H, dtype=torch.bfloat16)
    value = _rank_value(rank)
    out = {}
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=T, hidden=H, num_topk=K, explicitly_destroy=True)
    recv_x, _, _, handle, _ = buf.dispatch(x, idx, num_experts=E)
    out["v2"], _, _ = buf.combine(torch.full_like(recv_x, value), handle, bias=bias)
    # Expanded: the rank's partial sums its rows of the token; halves of the value add up exactly.
    recv_x, _, _, handle, _ = buf.dispatch(x, idx, num_experts=E, do_expand=True)
    y = torch.zeros_like(recv_x)
    for slots in handle.recv_src_metadata[: handle.num_recv_tokens, 2:]:
        rows = slots[slots >= 0].long()
        y[rows] = value / rows.numel()
    out["v2 expanded"], _, _ = buf.combine(y, handle, bias=bias)
    buf.destroy()

    legacy = deep_ep.Buffer(dist.group.WORLD, deep_ep.Config().get_nvl_buffer_size_hint(H * 2, world),
                            explicitly_destroy=True)
    per_rank, _, per_expert, in_rank, _ = legacy.get_dispatch_layout(idx, E)
    recv_x, _, _, _, handle, _ = legacy.dispatch(x, None, per_rank, None, in_rank, per_expert, idx, torch.ones(T, K, dtype=torch.float32))
    out["v1"], _, _ = legacy.combine(torch.full_like(recv_x, value), handle, bias=bias)
    legacy.destroy()
    return {k: v.float().tolist() for k, v in out.items()}


@pytest.mark.parametrize("backend", ["host", "reference"])
def test_combine_adds_partials_in_upstream_order(backend):
    env = {"EP_BACKEND": backend} if backend == "reference" else {}
    v2 = torch.tensor([c[1] for c in CASES])[:, None].expand(-1, H)
    v1 = torch.tensor([c[2] for c in CASES])[:, None].expand(-1, H)
    for out in run_ranks(_orders, 2, env=env):
        assert torch.equal(torch.tensor(out["v2"]), v2), torch.tensor(out["v2"])[:, 0]
        assert torch.equal(torch.tensor(out["v2 expanded"]), v2), torch.tensor(out["v2 expanded"])[:, 0]
        assert torch.equal(torch.tensor(out["v1"]), v1), torch.tensor(out["v1"])[:, 0]
