"""Numeric checks used by the tests: exact comparison, calc_diff, rounding-bias check, byte counts."""
import math

import torch


def assert_equal(x: torch.Tensor, y: torch.Tensor, check_dtype: bool = True, check_shape: bool = True,
                 check_stride: bool = True) -> None:
    assert not check_dtype or x.dtype == y.dtype, f"dtypes differ: {x.dtype} vs {y.dtype}"
    assert not check_shape or x.shape == y.shape, f"shapes differ: {tuple(x.shape)} vs {tuple(y.shape)}"
    assert not check_stride or x.numel() == 0 or x.stride() == y.stride(), f"strides differ: {x.stride()} vs {y.stride()}"
    assert x.device == y.device, f"devices differ: {x.device} vs {y.device}"
    a, b = (_flat_bytes(t) for t in (x, y))
    if not torch.equal(a, b):
        bad = (a != b).nonzero().flatten()
        raise AssertionError(f"{bad.numel()} of {a.numel()} bytes differ, first at byte {int(bad[0])}")


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    # a fresh 1-D copy: contiguous() keeps odd strides on size-1 dims, which blocks the byte view
    return torch.empty(t.numel(), dtype=t.dtype, device=t.device).copy_(t.reshape(-1)).view(torch.uint8)


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    return 0.0 if den == 0 else float(1 - 2 * (x * y).sum() / den)


def check_bias(x: torch.Tensor, ref_x: torch.Tensor) -> None:
    """Rounding must be unbiased: the share of values below the original stays near one half."""
    n = x.numel()
    if n == 0:
        return
    less = float((x < ref_x).sum()) + float((x == ref_x).sum()) / 2
    ratio = less / n
    assert abs(ratio - 0.5) < 10 / math.sqrt(n), f"biased rounding: {ratio:.4f} of {n} values below the original"


def count_bytes(*tensors) -> int:
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total
