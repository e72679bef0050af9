"""Shared fixtures of the tile_kernels tests: a per-test seed and the ``backend`` switch of the public ops
(reference, host kernels and the Ascend kernels on deepjit's Ascend twin; tests/testkit/backends.py)."""
import pytest
import torch

import tile_kernels._dispatch
from tests.testkit.backends import make_backend_fixture


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


backend = make_backend_fixture("TK", tile_kernels._dispatch.TABLE, ["host", "reference", "ascend"])


@pytest.fixture
def host(monkeypatch):
    """Forces the host kernels (fails loudly if no compiler rather than testing the reference twice)."""
    monkeypatch.setenv("TK_BACKEND", "host")
