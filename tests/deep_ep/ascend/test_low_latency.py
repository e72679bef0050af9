"""V1 low-latency mode with ``EP_BACKEND=ascend`` (deep_ep/ascend/low_latency.py): fixed-size outputs
(``[E_local, R * M]`` rows per expert, whatever the routing) and equal all-to-all splits; bit-exact
against the all-gather oracle of tests/deep_ep/test_low_latency.py on 3 ranks (BF16, FP8 cast fused
into the pack with FP32 and power-of-two scales, the weighted combine in slot order); shrink masks,
which need shared memory, are refused."""
import torch.distributed as dist

from tests.testkit.distributed import run_ranks

from ..faults import expect_error
from ..test_low_latency import LH, LM, _buffer, _oracle_exact


def _fixed_sizes(rank, world):
    import torch

    import deep_ep
    from deep_ep.ascend.low_latency import AscendLowLatencyEngine
    E = 4 * world
    buf = _buffer(world, E)
    assert isinstance(buf._ll, AscendLowLatencyEngine)
    shapes = []
    for tokens in (LM, 1):  # a full and an almost empty step have the same output shapes
        idx = torch.full((tokens, 2), -1, dtype=torch.int64)
        idx[:, 0] = torch.arange(tokens) % E
        recv, count, handle, _, _ = buf.low_latency_dispatch(torch.ones(tokens, LH).bfloat16(), idx, LM, E,
                                                             use_fp8=False)
        shapes.append((tuple(recv.shape), tuple(handle[0].shape)))
    buf.destroy()
    assert shapes[0] == shapes[1] == ((E // world, world * LM, LH), (E // world, world * LM)), shapes
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(LM, LH, world, E)
    expect_error(lambda: deep_ep.Buffer(dist.group.WORLD, 0, hint, low_latency_mode=True, enable_shrink=True),
                 ValueError, "enable_shrink needs", "shared memory")
    dist.barrier()
    return _oracle_exact(rank, world)


def test_low_latency_fixed_sizes_and_bit_exact_on_three_ranks():
    assert run_ranks(_fixed_sizes, 3, timeout=900, env={"EP_BACKEND": "ascend"}) == [True] * 3
