"""deepjit.ranks: values come back in rank order; a rank that raises fails the call soon after, naming it,
even while a peer would wait much longer (the multi-rank estimates' timeouts are half an hour)."""
import time

import pytest

from deepjit import ranks


def _value(rank, world):
    return (rank, world)


def _one_raises(rank, world):
    if rank == 1:
        raise ValueError("rank one gives up")
    time.sleep(60)   # a peer that would wait for it


def test_values_in_rank_order():
    assert ranks.run(_value, 3, timeout_s=120) == [(0, 3), (1, 3), (2, 3)]


def test_a_raising_rank_fails_the_call_without_waiting_for_its_peers():
    """Rank 0 would finish after 60 s, well inside the timeout: it is killed as still running only because
    its peer failed first."""
    with pytest.raises(ranks.RankFailure, match=r"(?s)--- rank 1 ---.*rank one gives up.*ranks \[0\] did not "
                                                r"finish within 10 s of a failed rank"):
        ranks.run(_one_raises, 2, timeout_s=300)
