"""Shared fixtures of the tile_kernels tests: a per-test seed and a switch between the host
kernels and the reference path of the public ops."""
import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(params=["host", "reference"])
def backend(request, monkeypatch):
    """Runs the test once on the host kernels and once on the reference path (TK_BACKEND)."""
    monkeypatch.setenv("TK_BACKEND", request.param)
    return request.param


@pytest.fixture
def host(monkeypatch):
    """Forces the host kernels (fails loudly if no compiler rather than testing the reference twice)."""
    monkeypatch.setenv("TK_BACKEND", "host")
