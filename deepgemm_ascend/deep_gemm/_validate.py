"""deep_gemm's argument checks: deepjit's shared ones (``deepjit.validation``: one argument order,
one message shape ``"<name>: expected <what>, got <what came>"``) plus the GEMM-specific operand,
layout and accumulator rules. Ops run all their checks before touching any caller tensor.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from deepjit import validation as _shared
from deepjit.validation import allocation, boolean, contiguous, fail, integer, output, overlaps, shape, tensor

__all__ = ["ab_major", "accumulator", "allocation", "boolean", "compiled_dims", "contiguous", "fail", "integer", "k_major",
           "optional_tensor", "output", "output_dtype", "pair", "row_major_out", "same_device", "same_storage",
           "shape", "tensor"]


def optional_tensor(name: str, t, **kw):
    return None if t is None else tensor(name, t, **kw)


def pair(name: str, p, second_optional: bool = False):
    """A ``(data, scale_factors)`` operand."""
    if not isinstance(p, (tuple, list)) or len(p) != 2:
        raise TypeError(f"{name}: expected a (tensor, scale_factors) pair, got {type(p).__name__}"
                        + (f" of length {len(p)}" if isinstance(p, (tuple, list)) else ""))
    if not isinstance(p[0], torch.Tensor):
        raise TypeError(f"{name}[0]: expected a torch.Tensor, got {type(p[0]).__name__}")
    if not (second_optional and p[1] is None) and not isinstance(p[1], torch.Tensor):
        raise TypeError(f"{name}[1]: expected a torch.Tensor, got {type(p[1]).__name__}")
    return p[0], p[1]


def ab_major(name: str, t: torch.Tensor) -> bool:
    """Operand layout: True for K-major (``stride(-1) == 1``), False for MN-major (``stride(-2) == 1``).

    3-D operands must be dense across the last two dims."""
    if t.dim() not in (2, 3):
        raise fail(name, "a 2-D or 3-D tensor", f"shape {tuple(t.shape)}")
    if t.dim() == 3 and t.size(0) > 1 and t.stride(0) != t.size(-2) * t.size(-1):
        raise fail(f"{name}.stride(0)", f"{t.size(-2) * t.size(-1)} (dense groups)", t.stride(0))
    if t.stride(-1) == 1:
        return True
    if t.stride(-2) == 1:
        return False
    raise fail(f"{name} strides", "stride(-1) == 1 (K-major) or stride(-2) == 1 (MN-major)", tuple(t.stride()))


def k_major(name: str, t: torch.Tensor) -> None:
    if not ab_major(name, t):
        raise fail(f"{name} strides", "a K-major layout (stride(-1) == 1)", tuple(t.stride()))


def row_major_out(name: str, t: torch.Tensor) -> None:
    """D and C: last dim contiguous (and dense groups when 3-D)."""
    if t.dim() == 3 and t.size(0) > 1 and t.stride(0) != t.size(-2) * t.size(-1):
        raise fail(f"{name}.stride(0)", f"{t.size(-2) * t.size(-1)} (dense groups)", t.stride(0))
    if t.stride(-1) != 1 and t.size(-1) > 1:
        raise fail(f"{name}.stride(-1)", "1 (row-major output)", t.stride(-1))


def same_device(named: Iterable[tuple[str, torch.Tensor | None]]) -> torch.device:
    return _shared.same_device(*named)


def compiled_dims(value) -> str:
    if not isinstance(value, str) or any(ch not in "mnk" for ch in value):
        raise fail("compiled_dims", "a string over the letters 'm', 'n', 'k'", repr(value))
    return value


def output_dtype(name: str, t: torch.Tensor, dtypes: Sequence[torch.dtype]) -> None:
    if t.dtype not in dtypes:
        raise fail(name, f"dtype {' or '.join(map(str, dtypes))}", t.dtype, TypeError)


def same_storage(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.data_ptr() == y.data_ptr()


def accumulator(c: torch.Tensor | None, d: torch.Tensor, must_be_d: bool = False) -> torch.Tensor | None:
    """``c``: D's dtype, shape and (when it is D) strides; ``must_be_d`` where the op accumulates in place."""
    if c is None:
        return None
    tensor("c", c)
    if c.dtype != d.dtype:
        raise TypeError(f"c: expected dtype {d.dtype} (the dtype of d), got {c.dtype}")
    shape("c", c, d.shape)
    row_major_out("c", c)
    if same_storage(c, d):
        if c.stride() != d.stride():
            raise fail("c.stride()", f"{tuple(d.stride())} (c shares d's memory)", tuple(c.stride()))
    elif must_be_d:
        raise fail("c", "the same tensor as d (accumulation is in place)", "a different tensor")
    elif overlaps(c, d):
        raise fail("c", "either d itself or memory disjoint from d", "a tensor overlapping d")
    return c
