"""The engram_gather table op (EngramBuffer.fetch's row gather): the host kernel copies the same rows
as the reference for tables split over peers, any row dtype and width, and no ids."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deep_ep._dispatch import TABLE


@settings(max_examples=15, deadline=None)
@given(peers=st.integers(1, 4), rows=st.integers(1, 9), width=st.integers(1, 70), count=st.integers(0, 40),
       dtype=st.sampled_from([torch.bfloat16, torch.float32, torch.float8_e4m3fn]), seed=st.integers(0, 2**16))
def test_host_gathers_the_reference_rows(peers, rows, width, count, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    tables = [torch.randn(rows, width, generator=g).to(dtype) for _ in range(peers)]
    ids = torch.randint(0, peers * rows, (count,), generator=g, dtype=torch.int32)
    want = TABLE["engram_gather"].reference.fn(tables, rows, ids, 2)
    got = TABLE["engram_gather"].host.fn(tables, rows, ids, 2)
    assert got.dtype == dtype and got.shape == (count, width)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    expected = torch.cat(tables)[ids.long()] if count else want  # every peer's rows in global-id order
    assert torch.equal(got.view(torch.uint8), expected.view(torch.uint8))


@settings(max_examples=10, deadline=None)
@given(peers=st.integers(1, 3), rows=st.integers(0, 6), width=st.integers(1, 9),
       dtype=st.sampled_from([torch.bfloat16, torch.float8_e4m3fn]), seed=st.integers(0, 2**16))
def test_reference_gives_zero_rows_for_ids_outside_the_table(peers, rows, width, dtype, seed):
    """The reference serves the Ascend path's odd-width rows, where ids are not range-checked on the host:
    ids outside [0, peers * rows) give zero rows, never stale memory."""
    g = torch.Generator().manual_seed(seed)
    tables = [(torch.rand(rows, width, generator=g) + 1).to(dtype) for _ in range(peers)]  # no zero value
    ids = torch.randint(-3, peers * rows + 3, (30,), generator=g, dtype=torch.int32)
    got = TABLE["engram_gather"].reference.fn(tables, rows, ids, 2)
    inside = (ids >= 0) & (ids < peers * rows)
    want = torch.zeros(30, width * dtype.itemsize, dtype=torch.uint8)
    if rows:
        want[inside] = torch.cat(tables).view(torch.uint8)[ids[inside].long()]
    assert got.dtype == dtype and torch.equal(got.view(torch.uint8), want)
