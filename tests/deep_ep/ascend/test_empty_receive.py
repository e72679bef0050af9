"""A rank that receives no token at all, with ``EP_BACKEND=ascend``: dispatch hands it empty outputs
(zero-row splits in every all-to-all) and combine still returns every token, token-major and
expanded (the same check as the host path's, tests/deep_ep/test_empty_receive.py)."""
from tests.testkit.distributed import run_ranks

from ..test_empty_receive import _all_to_rank0


def test_rank_without_tokens_gets_empty_outputs():
    assert run_ranks(_all_to_rank0, 2, timeout=600, env={"EP_BACKEND": "ascend"}) == [True, True]
