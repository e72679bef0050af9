"""EPBuffer dispatch and combine across real processes, bit-exact against the all-to-all oracle:
BF16 and FP8 (FP32 and packed UE8M0 scales), with and without weights, token-major and expanded
(alignment 1 and 128, zero padding), without CPU sync, cached dispatch, 0/1/2 biases, weights
round trip, with and without multiple reduction; on the host engine (shared memory and collectives),
the reference engine and the Ascend engine (kernels on the twin)."""
import pytest

from tests.testkit.distributed import run_ranks

from .ascend.matrix import ASCEND_CASES
from .ascend.matrix import run_matrix as run_ascend_matrix
from .cases import CASES, run_matrix


# 2 ranks, and 3 for uneven splits over several peers (4 ranks run in test_two_simulated_hosts)
@pytest.mark.parametrize("world, num_experts, topk", [(2, 32, 6), (3, 48, 8)])
def test_shared_memory_transport(world, num_experts, topk):
    outs = run_ranks(run_matrix, world, 256, num_experts, 48, topk, None, None, timeout=180)
    assert all(kind == "shm" and physical == (1, world) for kind, _, physical in outs)
    assert all(done == list(range(len(CASES))) for _, done, _ in outs)


@pytest.mark.parametrize("transport, expected", [(None, "hybrid"), ("dist", "dist")])
def test_two_simulated_hosts(transport, expected):
    """Four ranks on two "hosts": shared memory inside each host and collectives between them
    (chosen from the topology), or collectives only (forced); results identical to one host."""
    outs = run_ranks(run_matrix, 4, 256, 32, 40, 6, transport, 2, timeout=180)
    assert all(kind == expected for kind, _, _ in outs)
    assert all(physical == ((2, 2) if expected == "hybrid" else (1, 4)) for _, _, physical in outs)


def test_reference_backend_matches_the_oracle():
    """EP_BACKEND=reference: the plain-PyTorch engine over collectives (the NPU path)."""
    outs = run_ranks(run_matrix, 2, 256, 32, 48, 6, None, None, timeout=180, env={"EP_BACKEND": "reference"})
    assert all(kind == "dist" for kind, _, _ in outs)


def test_ascend_engine_matches_the_oracle():
    """EP_BACKEND=ascend: the NPU engine over gloo, its TileLang kernels on the Ascend twin. Every case of
    ascend/matrix.py on 3 ranks (uneven splits over three peers; top-4 over 12 experts) and the hand-worked
    2-rank case on a pair of them, in one spawn so each process lowers the kernels once."""
    outs = run_ranks(run_ascend_matrix, 3, 256, 12, 10, 4, None, timeout=900, env={"EP_BACKEND": "ascend"})
    assert outs == [list(range(len(ASCEND_CASES)))] * 3
