"""Argument checks shared by every library's public ops.

One argument order, ``(name, value, ...)``, and one message shape, ``"<name>: expected <what>, got
<what came>"``: ``TypeError`` for a wrong kind or dtype, ``ValueError`` for a wrong shape, stride,
device, value or aliasing. Ops run all their checks before any kernel runs or any caller tensor is
written.
"""
from __future__ import annotations

import numbers
import os
from collections.abc import Iterable, Sequence

import torch


def fail(name: str, expected: str, got, cls: type[Exception] = ValueError) -> Exception:
    return cls(f"{name}: expected {expected}, got {got}")


def _dtypes(dtypes) -> str:
    return " or ".join(str(d) for d in dtypes)


def tensor(name: str, t, dtypes: Iterable[torch.dtype] | None = None, ndim: int | Sequence[int] | None = None,
           shape: Sequence[int | None] | None = None, contiguous: bool = False, last_stride_one: bool = False,
           device: torch.device | None = None, like: str | None = None) -> torch.Tensor:
    """A tensor with the given dtypes, rank, shape (``None`` entries: any size), layout and device
    (``like`` names the argument whose device that is)."""
    if not isinstance(t, torch.Tensor):
        raise fail(name, "a torch.Tensor", type(t).__name__, TypeError)
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if t.dtype not in dtypes:
            raise fail(name, f"dtype {_dtypes(dtypes)}", t.dtype, TypeError)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in allowed:
            raise fail(name, f"a {' or '.join(map(str, allowed))}-D tensor", f"shape {tuple(t.shape)}")
    if shape is not None:
        if t.dim() != len(shape) or any(s is not None and s != g for s, g in zip(shape, t.shape, strict=False)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
            raise fail(name, f"shape {want}", tuple(t.shape))
    if contiguous:
        _contiguous(name, t)
    if last_stride_one:
        _last_stride_one(name, t)
    if device is not None and t.device != device:
        raise fail(name, f"device {device}" + (f" (the device of {like})" if like else ""), t.device)
    # A plain meta tensor has no data to compute on (tracing goes through the torch.ops Meta kernels); a
    # tensor subclass reporting meta carries its own data (an emulated device), so it passes.
    if t.device.type == "meta" and type(t) is torch.Tensor:
        raise fail(name, "a tensor with data", "a meta tensor", TypeError)
    return t


def optional(name: str, t, **kw) -> torch.Tensor | None:
    return None if t is None else tensor(name, t, **kw)


def shape(name: str, t: torch.Tensor, expected: Sequence[int]) -> None:
    if tuple(t.shape) != tuple(expected):
        raise fail(name, f"shape {tuple(expected)}", tuple(t.shape))


def _contiguous(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise fail(name, "a contiguous tensor", f"strides {tuple(t.stride())} for shape {tuple(t.shape)}")


def _last_stride_one(name: str, t: torch.Tensor) -> None:
    if t.dim() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise fail(name, "unit stride in the last dim", f"strides {tuple(t.stride())}")


contiguous, last_stride_one = _contiguous, _last_stride_one  # tensor()'s keywords of the same names shadow them


def choice(name: str, value, allowed: Iterable):
    allowed = tuple(allowed)
    if isinstance(value, bool) and not any(isinstance(a, bool) for a in allowed) or value not in allowed:
        raise fail(name, f"one of {allowed}", repr(value))
    return value


def integer(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(name, "an int", type(value).__name__, TypeError)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        if hi is None:
            want = f"a value >= {lo}"
        elif lo is None:
            want = f"a value <= {hi}"
        else:
            want = f"a value in [{lo}, {hi}]"
        raise fail(name, want, value)
    return value


def _free_bytes(device) -> int | None:
    """Bytes an allocation on ``device`` can take now: the host's available memory (MemAvailable) for
    CPU tensors, the accelerator's free memory otherwise; None where it cannot be known."""
    kind = getattr(device, "type", device) or "cpu"
    if kind == "cpu":
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (OSError, ValueError):
            return None
    backend = getattr(torch, kind, None)
    try:
        return int(backend.mem_get_info(device)[0])
    except Exception:  # noqa: BLE001 - a backend without memory queries: nothing to check against
        return None


def allocation(name: str, nbytes: int, device, what: str) -> None:
    """An allocation of ``nbytes`` (``what``: the tensor it sizes) from the caller's integer ``name``
    fits the memory ``device`` has free now: an impossible size is a ValueError naming the argument,
    before anything is allocated (not an OOM kill half-way through)."""
    free = _free_bytes(device)
    if free is not None and nbytes > free:
        raise fail(name, f"a size whose {what} fits the {free / 2**30:.1f} GiB free on {device}",
                   f"{nbytes / 2**30:.1f} GiB")


def number(name: str, value, finite: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise fail(name, "a number", type(value).__name__, TypeError)
    value = float(value)
    if finite and (value != value or value in (float("inf"), float("-inf"))):
        raise fail(name, "a finite number", value)
    return value


def boolean(name: str, value, allow_int: bool = False) -> bool:
    """A bool (``allow_int``: also 0 or 1, as older APIs passed)."""
    if not isinstance(value, bool) and not (allow_int and isinstance(value, int) and value in (0, 1)):
        raise fail(name, "a bool", repr(value) if isinstance(value, int) else type(value).__name__, TypeError)
    return bool(value)


def same_device(*named: tuple[str, torch.Tensor | None], **kw: torch.Tensor | None) -> torch.device | None:
    """All given tensors (``(name, tensor)`` pairs or keywords; ``None`` skipped) on one device, returned."""
    device = first = None
    for name, t in (*named, *kw.items()):
        if not isinstance(t, torch.Tensor):
            continue
        if device is None:
            device, first = t.device, name
        elif t.device != device:
            raise fail(name, f"device {device} (the device of {first})", t.device)
    return device


# ---- outputs the caller gives -----------------------------------------------------------------------
def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first, last) byte addresses ``t`` can touch."""
    if t.numel() == 0:
        return 0, 0
    start = t.data_ptr()
    return start, start + (sum((s - 1) * st for s, st in zip(t.shape, t.stride(), strict=True)) + 1) * t.element_size()


def overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether the memory ``x`` and ``y`` can touch intersects (conservative for interleaved views)."""
    if x.device != y.device:
        return False
    (a0, a1), (b0, b1) = _span(x), _span(y)
    return a0 < b1 and b0 < a1


def self_overlapping(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` share memory (a zero stride, or strides that interleave)."""
    extent = 0
    for size, stride in sorted(((s, abs(st)) for s, st in zip(t.shape, t.stride(), strict=True) if s > 1),
                               key=lambda p: p[1]):
        if stride <= extent:
            return True
        extent += stride * (size - 1)
    return False


def output(name: str, out: torch.Tensor, *inputs: tuple[str, torch.Tensor | None],
           in_place: Iterable[str] = ()) -> None:
    """A caller-given output: no element written twice, and no memory shared with an input, except
    inputs named in ``in_place`` (upstream's in-place forms, e.g. ``c`` is ``d``) when they are
    exactly ``out`` (same address, shape and strides)."""
    if out.numel() and self_overlapping(out):
        raise fail(name, "an output whose elements do not overlap",
                   f"strides {tuple(out.stride())} for shape {tuple(out.shape)}")
    in_place = tuple(in_place)
    out_start, out_end = _span(out)   # once, not once per input (overlaps() would redo it)
    for in_name, t in inputs:
        if not isinstance(t, torch.Tensor) or t.device != out.device:
            continue
        start, end = _span(t)
        if not (out_start < end and start < out_end):
            continue
        if in_name in in_place and t.data_ptr() == out.data_ptr() and t.shape == out.shape \
                and t.stride() == out.stride():
            continue
        raise fail(name, f"memory disjoint from {in_name}", f"{name} overlapping {in_name}")
