"""The Ascend engine on real NPUs over HCCL (``npu``-marked: skipped, with the reason, without 2+ NPUs):
the dispatch/combine matrix against the all-to-all oracle on NPU tensors. The ranks take one NPU
each; the oracle runs on CPU copies."""
import pytest

from tests.testkit.distributed import run_ranks

pytestmark = pytest.mark.npu


def _npu_count() -> int:
    import torch
    import torch_npu  # noqa: F401
    return torch.npu.device_count()


def _on_npu(rank, world):
    import torch
    import torch.distributed as dist
    import torch_npu  # noqa: F401

    import deep_ep
    from deep_ep.ascend.engine import AscendEngine

    from .. import refs
    torch.npu.set_device(rank)
    group = dist.new_group(backend="hccl")
    E, M, H, K = 8 * world, 64, 512, 4
    buf = deep_ep.EPBuffer(group, num_max_tokens_per_rank=M, hidden=H, num_topk=K, explicitly_destroy=True)
    assert isinstance(buf._engine, AscendEngine)
    idx, w = refs.make_routing(M, K, E, seed=rank)
    x = refs.make_x(M, H, seed=rank)
    recv_x, recv_idx, recv_w, handle, _ = buf.dispatch(x.npu(), idx.npu(), w.npu(), num_experts=E)
    ref = refs.dispatch(x, None, idx, w, E, M)
    n = sum(ref["counts"])
    assert torch.equal(recv_x[:n].cpu(), ref["x"]) and torch.equal(recv_idx[:n].cpu(), ref["topk_idx"])
    g = handle.recv_src_metadata[:n, 0].long().cpu()
    y = torch.stack([refs.ordered_sum(list(refs.expert_output(g[i].repeat(int((ref["topk_idx"][i] >= 0).sum())),
                                                               (ref["topk_idx"][i] >= 0).nonzero().squeeze(1), H)))
                     for i in range(n)]) if n else torch.zeros(0, H).bfloat16()
    combined, _, _ = buf.combine(y.npu(), handle)
    assert torch.equal(combined.cpu(), refs.combine(idx, E, world, rank, M, H))
    buf.destroy()
    return True


def test_hccl_dispatch_combine_matches_the_oracle():
    if _npu_count() < 2:
        pytest.skip("needs 2+ NPUs for HCCL")
    assert run_ranks(_on_npu, 2, timeout=600) == [True, True]
