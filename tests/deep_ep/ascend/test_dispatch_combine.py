"""EPBuffer dispatch and combine with ``EP_BACKEND=ascend`` (the NPU engine over gloo, kernels on the
Ascend twin) across 3 real processes (and a 2-rank group of them), bit-exact against the all-to-all oracle of
tests/deep_ep/refs.py and upstream's summation order: BF16 and FP8 (FP32 and packed UE8M0 scales),
token-major and expanded (alignment 128 with zero padding), without CPU sync, cached, biases,
weights round trip, with and without multiple reduction."""
from tests.testkit.distributed import run_ranks

from .matrix import ASCEND_CASES, run_matrix


# Every case on 3 ranks (uneven splits over three peers; top-4 over 12 experts), and the hand-worked
# 2-rank case on a pair of them: one set of spawned processes, each paying the kernels' lowering once.
def test_matches_the_oracle():
    outs = run_ranks(run_matrix, 3, 256, 12, 10, 4, None, timeout=900, env={"EP_BACKEND": "ascend"})
    assert outs == [list(range(len(ASCEND_CASES)))] * 3
