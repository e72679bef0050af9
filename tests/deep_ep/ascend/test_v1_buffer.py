"""The V1 ``Buffer`` facade with ``EP_BACKEND=ascend``, through the host path's checks
(tests/deep_ep/test_v1_and_async.py): the normal mode (layout, dispatch with alignment, weights,
cached and worst-case dispatches, rank-only routing, FP8 input, the rank-order combine) and the
low-latency mode on the Ascend low-latency engine (BF16 / FP8, async, receive hooks, zero copy, out)."""
from tests.testkit.distributed import run_ranks

from ..test_v1_and_async import _v1_low_latency, _v1_normal

ENV = {"EP_BACKEND": "ascend"}


def test_v1_normal_mode():
    assert run_ranks(_v1_normal, 2, timeout=900, env=ENV) == [True, True]


def test_v1_low_latency_mode():
    assert run_ranks(_v1_low_latency, 2, timeout=900, env=ENV) == [True, True]
