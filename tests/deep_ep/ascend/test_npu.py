"""The Ascend engine on DEVICE (tests/testkit/npu.py): over HCCL with one NPU per rank (skipped, with the
reason, without 2+ NPUs), or with NPU_TESTS_ON_TWIN=1 over gloo on CPU tensors with EP_BACKEND=ascend (its
kernels on the Ascend twin). Normal dispatch/combine (the Ascend matrix, tests/deep_ep/ascend/matrix.py) and
low-latency dispatch/combine (tests/deep_ep/test_low_latency.py) against their oracles, which run on CPU
copies. The twin runs the twin tests' shapes (their kernels are cached); an NPU runs larger ones."""
import pytest

from tests.testkit.distributed import run_ranks
from tests.testkit.npu import ASCEND_ENV, DEVICE, ON_TWIN

from .matrix import ASCEND_CASES, run_matrix

pytestmark = pytest.mark.npu
WORLD = 2
# hidden, num_experts, num_max_tokens_per_rank, num_topk
SHAPE = (256, 16, 10, 4) if ON_TWIN else (2048, 32, 128, 8)


def _need_npus(n: int) -> None:
    if ON_TWIN:
        return
    import torch
    import torch_npu  # noqa: F401
    if torch.npu.device_count() < n:
        pytest.skip(f"needs {n}+ NPUs for HCCL; {torch.npu.device_count()} present")


def _group(rank):
    """The group the buffers use: gloo's WORLD on the twin, a new HCCL group on NPU ``rank`` otherwise
    (WORLD stays gloo for the oracle's CPU collectives)."""
    import torch.distributed as dist
    if ON_TWIN:
        return dist.group.WORLD
    import torch
    import torch_npu  # noqa: F401
    torch.npu.set_device(rank)
    return dist.new_group(backend="hccl")


def _normal(rank, world):
    return run_matrix(rank, world, *SHAPE, group=_group(rank), device=DEVICE)


def _low_latency(rank, world):
    from deep_ep.ascend.low_latency import AscendLowLatencyEngine

    from ..test_low_latency import _buffer, _oracle_exact
    group = _group(rank)
    buf = _buffer(world, 4 * world, group)
    assert isinstance(buf._ll, AscendLowLatencyEngine)
    buf.destroy()
    return _oracle_exact(rank, world, group=group, device=DEVICE)


def test_dispatch_combine_matches_the_oracle():
    _need_npus(WORLD)
    outs = run_ranks(_normal, WORLD, timeout=600, env=ASCEND_ENV)
    assert outs == [list(range(len(ASCEND_CASES)))] * WORLD


def test_low_latency_dispatch_combine_matches_the_oracle():
    _need_npus(WORLD)
    assert run_ranks(_low_latency, WORLD, timeout=600, env=ASCEND_ENV) == [True] * WORLD
