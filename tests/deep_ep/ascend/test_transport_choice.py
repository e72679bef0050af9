"""The Ascend engine's transport choice (deep_ep/ascend/transport_choice.py) from every rank's ``(host,
EP_ASCEND_TRANSPORT, CANN SHMEM ready)``: ``auto`` takes the window on the twin's one host and on one NPU host
with CANN SHMEM initialised everywhere, the collectives otherwise; ``hccl`` always the collectives; ``symm``
the window or a ValueError naming EP_ASCEND_TRANSPORT where none can exist. The runs: test_symm_transport.py
(auto and symm on one host), test_ll_symm.py (two simulated hosts)."""
import types

import pytest

from deep_ep.ascend.transport_choice import decide
from tests.testkit.distributed import run_ranks


def _ranks(value, hosts=("a", "a"), ready=(False, False)):
    return [(h, value, r) for h, r in zip(hosts, ready, strict=True)]


@pytest.mark.parametrize("device, ranks, window", [
    ("cpu", _ranks("auto"), True),
    ("cpu", _ranks("auto", ("a", "b")), False),
    ("cpu", _ranks("symm"), True),
    ("cpu", _ranks("hccl"), False),
    ("npu", _ranks("auto", ready=(True, True)), True),
    ("npu", _ranks("auto", ready=(True, False)), False),
    ("npu", _ranks("auto", ("a", "b"), (True, True)), False),   # a supernode opts in with symm
    ("npu", _ranks("symm", ("a", "b"), (True, True)), True),
    ("npu", _ranks("hccl", ready=(True, True)), False),
])
def test_choice(device, ranks, window):
    assert decide(device, ranks) is window


@pytest.mark.parametrize("device, ranks, message", [
    ("cpu", _ranks("symm", ("a", "b")), "EP_ASCEND_TRANSPORT: expected 'auto' or 'hccl' for ranks on several hosts"),
    ("npu", _ranks("symm", ready=(True, False)), "EP_ASCEND_TRANSPORT: expected 'auto' or 'hccl' unless every rank "
                                                 "has initialised CANN SHMEM"),
    ("cpu", [("a", "auto", False), ("a", "hccl", False)], "EP_ASCEND_TRANSPORT: expected one value on every rank"),
    ("cpu", [("a", "auto", False), ("a", "shm", False)], "EP_ASCEND_TRANSPORT: expected one of auto, symm, hccl on "
                                                         "every rank, got 'shm' on rank 1"),
])
def test_refusals(device, ranks, message):
    with pytest.raises(ValueError, match=message):
        decide(device, ranks)


def _one_bad_value(rank, world):
    """Rank 1 sets a value that is not a choice: both ranks raise the same ValueError (after the gather, so rank 0
    is not left waiting in it)."""
    import os

    import torch
    import torch.distributed as dist

    from deep_ep.ascend.transport_choice import uses_window
    os.environ["EP_ASCEND_TRANSPORT"] = "shm" if rank == 1 else "auto"
    try:
        uses_window(types.SimpleNamespace(group=dist.group.WORLD, device=torch.device("cpu")))
    except ValueError as exc:
        return str(exc)
    return "no error"


def test_a_bad_value_on_one_rank_fails_every_rank():
    for msg in run_ranks(_one_bad_value, 2, timeout=120):
        assert "EP_ASCEND_TRANSPORT: expected one of auto, symm, hccl on every rank, got 'shm' on rank 1" in msg, msg
