"""deep_ep under a BF16 default dtype (what upstream DeepEP's ``init_dist`` sets): every buffer the
library allocates names its dtype, so FP32 weights, scales and accumulators never land in BF16-sized
memory (a heap overflow before). The suite's own scenarios, rerun with ``torch.set_default_dtype``
set in every rank."""
from tests.testkit.distributed import run_ranks

from .cases import CASES, run_matrix
from .test_bucket_lb import _bucket, _lb
from .test_low_latency import _oracle_exact
from .test_v1_and_async import _async, _v1_low_latency, _v1_normal

BF16 = {"DJ_TEST_DEFAULT_DTYPE": "bfloat16"}


def test_dispatch_combine_matrix_under_bf16_default():
    outs = run_ranks(run_matrix, 2, 256, 32, 48, 6, None, None, timeout=180, env=BF16)
    assert all(done == list(range(len(CASES))) for _, done, _ in outs)


def test_v1_async_and_low_latency_under_bf16_default():
    assert run_ranks(_v1_normal, 2, timeout=120, env=BF16) == [True, True]
    assert run_ranks(_v1_low_latency, 2, timeout=120, env=BF16) == [True, True]
    assert run_ranks(_async, 2, timeout=120, env=BF16) == [True, True]
    assert run_ranks(_oracle_exact, 3, timeout=120, env=BF16) == [True] * 3


def test_bucket_and_load_balancing_under_bf16_default():
    assert run_ranks(_bucket, 2, "shm", timeout=120, env=BF16) == ["shm"] * 2
    assert run_ranks(_lb, 2, "dist", timeout=120, env=BF16) == [True] * 2
