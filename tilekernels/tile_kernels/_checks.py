"""Argument validation shared by every op: each failure names the argument, what was expected
and what came, and is raised before any kernel runs or any caller tensor is written."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch


def tensor(name: str, t, dtypes: Iterable[torch.dtype] | None = None, ndim: int | Sequence[int] | None = None,
           shape: Sequence[int | None] | None = None, contiguous: bool = False, last_stride_one: bool = False,
           device: torch.device | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if t.dtype not in dtypes:
            raise TypeError(f"{name} must have dtype {' or '.join(str(d) for d in dtypes)}, got {t.dtype}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in allowed:
            raise ValueError(f"{name} must be {' or '.join(map(str, allowed))}-D, got shape {tuple(t.shape)}")
    if shape is not None:
        if t.dim() != len(shape) or any(s is not None and s != g for s, g in zip(shape, t.shape, strict=False)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name} must have shape {want}, got {tuple(t.shape)}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {t.stride()} for shape {tuple(t.shape)}")
    if last_stride_one and t.dim() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have unit stride in its last dimension, got strides {t.stride()}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on device {device}, got {t.device}")
    return t


def optional(name: str, t, **kw):
    return None if t is None else tensor(name, t, **kw)


def choice(name: str, value, allowed: Iterable):
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def integer(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        rng = f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
        raise ValueError(f"{name} must be in {rng}, got {value}")
    return value


def number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    return float(value)


def same_device(**tensors) -> None:
    items = [(n, t) for n, t in tensors.items() if isinstance(t, torch.Tensor)]
    if items:
        d0 = items[0][1].device
        for n, t in items[1:]:
            if t.device != d0:
                raise ValueError(f"{n} must be on {d0} like {items[0][0]}, got {t.device}")
