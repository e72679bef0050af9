"""EPBuffer dispatch and combine with ``EP_BACKEND=ascend`` (the NPU engine over gloo, kernels on the
Ascend twin) across 2 and 3 real processes, bit-exact against the all-to-all oracle of
tests/deep_ep/refs.py and upstream's summation order: BF16 and FP8 (FP32 and packed UE8M0 scales),
token-major and expanded (alignment 128 with zero padding), without CPU sync, cached, biases,
weights round trip, with and without multiple reduction."""
import pytest

from tests.testkit.distributed import run_ranks

from .matrix import ASCEND_CASES, run_matrix


# Every case on 2 ranks; on 3 ranks (uneven splits over three peers) the FP8 expanded case with its
# cached dispatch and biases, the one that moves every kind of payload (each case costs minutes here).
@pytest.mark.parametrize("world, num_experts, topk, cases", [(2, 16, 4, None), (3, 12, 3, (1,))])
def test_matches_the_oracle(world, num_experts, topk, cases):
    outs = run_ranks(run_matrix, world, 256, num_experts, 10, topk, cases, timeout=900, env={"EP_BACKEND": "ascend"})
    assert outs == [list(cases or range(len(ASCEND_CASES)))] * world
