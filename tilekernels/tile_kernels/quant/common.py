"""What the quantisation ops share: argument checks for formats, QuantTensor inputs and scale
layouts, the output scale allocation, and launching the host cast / cast-back kernels."""
from __future__ import annotations

import torch

from deepjit import validation as C

from ..reference.numerics import unpack_from_e2m1fn_x2
from ..utils import align, ceil_div

__all__ = ["unpack_from_e2m1fn_x2"]

FMT_CODES = {"e4m3": 0, "e2m1": 1}
DATA_DTYPES = (torch.float8_e4m3fn, torch.int8)


def logical_hidden(t: torch.Tensor) -> int:
    return t.shape[1] * 2 if t.dtype == torch.int8 else t.shape[1]


def check_fmt(fmt, allowed=("e4m3", "e2m1")) -> str:
    if not isinstance(fmt, str):
        raise C.fail("fmt", "a str", type(fmt).__name__, TypeError)
    return C.choice("fmt", fmt, allowed)


def check_block(name: str, block) -> tuple[int, int]:
    if not isinstance(block, (tuple, list)) or len(block) != 2:
        raise C.fail(name, "a (rows, cols) tuple", repr(block), TypeError)
    return C.integer(f"{name}[0]", block[0], 1), C.integer(f"{name}[1]", block[1], 1)


def check_sf_for(name: str, sf, rows: int, hidden: int, block: tuple[int, int],
                 packed: tuple[torch.dtype, ...] = (torch.int32,)) -> torch.Tensor:
    """A scale tensor covering a (rows, hidden) tensor in blocks: FP32 (any strides) or packed UE8M0 words
    of a ``packed`` dtype (int32 quads; int16 pairs, the Ascend form, where the consumer reads them)."""
    C.tensor(name, sf, dtypes=(torch.float32, *packed), ndim=2)
    mb, kb = ceil_div(rows, block[0]), ceil_div(hidden, block[1])
    want = (mb, kb) if sf.dtype == torch.float32 else (mb, ceil_div(kb, sf.element_size()))
    if tuple(sf.shape) != want:
        raise C.fail(name, f"shape {want} for data of shape ({rows}, {hidden}) and block {block} ({sf.dtype})",
                     tuple(sf.shape))
    return sf


def check_quant_input(name: str, x, x_block_size, allow_fp4: bool = True,
                      packed: tuple[torch.dtype, ...] = (torch.int32,)) -> tuple:
    """``x`` is a BF16/FP32 tensor (x_block_size None) or a QuantTensor ``(data, sf)``; ``packed``: the
    packed-UE8M0 scale dtypes accepted."""
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise C.fail(name, "a tensor or a (data, sf) pair", f"a {type(x).__name__} of length {len(x)}", TypeError)
        q, sf = x
        C.tensor(f"{name}[0]", q, dtypes=DATA_DTYPES if allow_fp4 else DATA_DTYPES[:1], ndim=2, last_stride_one=True)
        if x_block_size is None:
            raise C.fail("x_block_size", f"a (rows, cols) tuple when {name} is a (data, sf) pair", None)
        block = check_block("x_block_size", x_block_size)
        check_sf_for(f"{name}[1]", sf, q.shape[0], logical_hidden(q), block, packed)
        C.same_device(data=q, sf=sf)
        return "quant", q, sf, block
    C.tensor(name, x, dtypes=(torch.bfloat16, torch.float32), ndim=2, last_stride_one=True)
    if x_block_size is not None:
        raise C.fail("x_block_size", f"None for a plain tensor {name}", repr(x_block_size))
    return "float", x, None, None


def sf_strides(sf: torch.Tensor) -> tuple[int, int, int]:
    """(packed, row stride, column stride) of a scale tensor, strides in its own elements."""
    return int(sf.dtype == torch.int32), sf.stride(0), sf.stride(1)


def alloc_sf(mb: int, kb: int, col_major: bool, packed: bool, device) -> torch.Tensor:
    """Output scales: FP32 row-major (mb, kb); FP32 column-major view of (kb, align(mb, 4)); or
    packed UE8M0 int32 column-major view of (ceil(kb/4), align(mb, 4)). Padding is zero."""
    if not col_major:
        return torch.empty((mb, kb), dtype=torch.float32, device=device)
    if packed:
        return torch.zeros((ceil_div(kb, 4), align(mb, 4)), dtype=torch.int32, device=device).T[:mb]
    return torch.zeros((kb, align(mb, 4)), dtype=torch.float32, device=device).T[:mb]
