"""Benchmarks of the Ascend EP engine on real NPUs over HCCL (make bench, 2+ NPUs; skipped with the
reason otherwise): dispatch and combine GB/s against the published EP8 figures (dispatch 373 GB/s,
combine 345 GB/s, issue 13). Bytes are counted as tests/deep_ep/test_bench_ep.py counts them: received
tokens x bytes per token of what dispatch returns (FP8 data, scales, indices, weights), and for combine
received tokens x (BF16 row + weights). Each rank times with NPU events; the slowest rank's median counts."""
import pytest

from tests.testkit.distributed import run_ranks
from tests.testkit.npu import npu_seconds

pytestmark = [pytest.mark.bench, pytest.mark.npu]
H, K, EXPERTS_PER_RANK, M = 7168, 8, 32, 4096
TARGET_GBS = {"dispatch": 373.0, "combine": 345.0}


def _npu_count() -> int:
    import torch
    import torch_npu  # noqa: F401
    return torch.npu.device_count()


def _on_npu(rank, world):
    import torch
    import torch.distributed as dist
    import torch_npu  # noqa: F401

    import deep_ep
    from deep_ep.utils.math import per_token_cast_to_fp8

    from .. import refs
    torch.npu.set_device(rank)
    group = dist.new_group(backend="hccl")
    E = EXPERTS_PER_RANK * world
    buf = deep_ep.EPBuffer(group, num_max_tokens_per_rank=M, hidden=H, num_topk=K, use_fp8_dispatch=True,
                           explicitly_destroy=True)
    idx, w = refs.make_routing(M, K, E, seed=rank, masked_ratio=0.0)
    x = tuple(t.npu() for t in per_token_cast_to_fp8(refs.make_x(M, H, seed=rank)))
    idx, w = idx.npu(), w.npu()
    recv_x, _, _, handle, _ = buf.dispatch(x, idx, w, num_experts=E)
    n = recv_x[0].shape[0]
    y = torch.randn(n, H).bfloat16().npu()
    t_dispatch = npu_seconds(lambda: buf.dispatch(x, idx, w, num_experts=E), warmup=2, reps=10)
    t_combine = npu_seconds(lambda: buf.combine(y, handle), warmup=2, reps=10)
    out = dict(t_dispatch=t_dispatch, t_combine=t_combine, dispatch_bytes=n * (H + recv_x[1].shape[1] * 4 + K * 12),
               combine_bytes=n * (H * 2 + K * 4))
    buf.destroy()
    return out


@pytest.mark.parametrize("world", [2, 8])
def test_bench_hccl_dispatch_combine(bench, world):
    if _npu_count() < world:
        pytest.skip(f"needs {world} NPUs for HCCL EP{world}; {_npu_count()} present")
    outs = run_ranks(_on_npu, world, timeout=900)
    for op in ("dispatch", "combine"):
        seconds = max(o[f"t_{op}"] for o in outs)
        nbytes = sum(o[f"{op}_bytes"] for o in outs) / world
        bench.record("deep_ep", f"ascend hccl {op} EP{world}", f"M{M} H{H} top{K}", seconds, nbytes=nbytes,
                     baseline=f"published EP8 ({TARGET_GBS[op]:.0f} GB/s)",
                     baseline_seconds=nbytes / (TARGET_GBS[op] * 1e9))
