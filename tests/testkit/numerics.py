"""Accuracy helpers shared by every package's tests."""
from __future__ import annotations

import torch

# upstream's own metric (``deep_gemm.testing``), the one every package's tolerances are stated in
from deep_gemm.testing import calc_diff  # noqa: F401


def assert_bitwise_equal(a: torch.Tensor, b: torch.Tensor, name: str = "tensor") -> None:
    assert a.shape == b.shape, f"{name}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    assert a.dtype == b.dtype, f"{name}: dtype {a.dtype} != {b.dtype}"
    ua, ub = a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    if not torch.equal(ua, ub):
        diff = (ua != ub).nonzero()
        raise AssertionError(f"{name}: {diff.shape[0]} bytes differ, first at byte {diff[0].tolist()}")


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed: int = 0, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=generator(seed)) * scale).to(dtype)


def randint(low: int, high: int, *shape, seed: int = 0, dtype=torch.int64) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=generator(seed), dtype=dtype)
