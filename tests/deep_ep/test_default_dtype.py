"""deep_ep under a BF16 default dtype (what upstream DeepEP's ``init_dist`` sets): every buffer the
library allocates names its dtype, so FP32 weights, scales and accumulators never land in BF16-sized
memory (a heap overflow before). The suite's own scenarios, rerun with ``torch.set_default_dtype``
set in every rank."""
from tests.testkit.distributed import in_sequence, run_ranks

from .cases import CASES, run_matrix
from .test_bucket_lb import _bucket, _lb
from .test_low_latency import _oracle_exact
from .test_v1_and_async import _async, _v1_low_latency, _v1_normal

BF16 = {"DJ_TEST_DEFAULT_DTYPE": "bfloat16"}


def test_two_rank_scenarios_under_bf16_default():
    """The dispatch/combine matrix, V1 normal and low-latency, async, bucket and load balancing: one spawn."""
    steps = ((run_matrix, 256, 32, 48, 6, None, None), (_v1_normal,), (_v1_low_latency,), (_async,),
             (_bucket, "shm"), (_lb, "dist"))
    outs = run_ranks(in_sequence, 2, *steps, timeout=300, env=BF16)
    for matrix, v1_normal, v1_low_latency, async_, bucket, lb in outs:
        assert matrix[1] == list(range(len(CASES)))
        assert v1_normal and v1_low_latency and async_ and bucket == "shm" and lb is True


def test_low_latency_bit_exact_under_bf16_default():
    assert run_ranks(_oracle_exact, 3, timeout=120, env=BF16) == [True] * 3
