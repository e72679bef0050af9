"""Accuracy metrics of the upstream tests."""
from __future__ import annotations

import torch


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """``1 - 2*sum(x*y) / sum(x*x + y*y)`` in float64; 0 when both are all zero."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if denominator == 0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denominator)


def count_bytes(*tensors) -> int:
    """Bytes of every tensor given, looking into (data, sf) tuples and lists; None counts 0."""
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        elif isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
    return total


def assert_bitwise_equal(x: torch.Tensor, y: torch.Tensor) -> None:
    """Same shape, dtype and bytes (NaN payloads included)."""
    assert x.shape == y.shape, f"shape {tuple(x.shape)} != {tuple(y.shape)}"
    assert x.dtype == y.dtype, f"dtype {x.dtype} != {y.dtype}"
    bx, by = x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)
    if not torch.equal(bx, by):
        first = (bx != by).nonzero()[0].tolist()
        raise AssertionError(f"tensors differ bitwise, first differing byte at {first}")


