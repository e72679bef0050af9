"""Argument checks shared by the public ops: each raises before any work, naming the argument,
what was expected and what came."""
from __future__ import annotations

import numbers
from collections.abc import Iterable

import torch

from .kv_cache import KVCacheFormat

CACHE_DTYPES = (torch.float8_e4m3fn, torch.int8, torch.uint8)
SUPPORTED_H_Q = (64, 128)
SUPPORTED_D_QK = (576, 512)
D_V = 512


def tensor(t, name: str, dtypes: Iterable[torch.dtype], ndim: int, device: torch.device | None = None,
           optional: bool = False) -> None:
    if t is None:
        if optional:
            return
        raise TypeError(f"{name}: expected a tensor, got None")
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    dtypes = tuple(dtypes)
    if t.dtype not in dtypes:
        raise TypeError(f"{name}: dtype must be {' or '.join(str(d) for d in dtypes)}, got {t.dtype}")
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got shape {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name}: must be on {device} like q, got {t.device}")


def last_dim_contiguous(t: torch.Tensor, name: str) -> None:
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}: last dim must be contiguous (stride 1), got strides {t.stride()}")


def contiguous(t: torch.Tensor, name: str) -> None:
    if not t.is_contiguous():
        raise ValueError(f"{name}: must be contiguous, got strides {t.stride()} for shape {tuple(t.shape)}")


def shape(t: torch.Tensor, name: str, expected: tuple) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name}: expected shape {tuple(expected)}, got {tuple(t.shape)}")


def one_of(value, name: str, allowed: tuple) -> None:
    if isinstance(value, bool) or value not in allowed:
        raise ValueError(f"{name}: must be one of {allowed}, got {value!r}")


def real_number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a float, got {type(value).__name__}")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name}: must be finite, got {value}")
    return value


def flag(value, name: str) -> bool:
    if not isinstance(value, (bool, int)) or isinstance(value, int) and value not in (0, 1):
        raise TypeError(f"{name}: expected a bool, got {value!r}")
    return bool(value)


def lengths(t: torch.Tensor | None, name: str, n: int, limit: int, device) -> None:
    """An optional int32 [n] length vector with values in [0, limit]."""
    if t is None:
        return
    tensor(t, name, (torch.int32,), 1, device)
    shape(t, name, (n,))
    contiguous(t, name)
    if n and (int(t.min()) < 0 or int(t.max()) > limit):
        raise ValueError(f"{name}: values must lie in [0, {limit}], got range "
                         f"[{int(t.min())}, {int(t.max())}]")


def attn_sink(t: torch.Tensor | None, h_q: int, device) -> None:
    if t is None:
        return
    tensor(t, "attn_sink", (torch.float32,), 1, device)
    shape(t, "attn_sink", (h_q,))
    contiguous(t, "attn_sink")


def quantized_cache(t: torch.Tensor, name: str, d_qk: int, device) -> KVCacheFormat:
    """A [num_blocks, page_block_size, 1, bytes_per_token] byte cache matching d_qk; its format."""
    tensor(t, name, CACHE_DTYPES, 4, device)
    fmt = KVCacheFormat.from_bytes_per_token(t.shape[-1], name)
    nb, p, h_k, bpt = t.shape
    if h_k != 1:
        raise ValueError(f"{name}: num_heads_k (dim 2) must be 1 (MQA), got {h_k}")
    if p < 1:
        raise ValueError(f"{name}: page_block_size must be >= 1, got {p}")
    if fmt.d_qk != d_qk:
        raise ValueError(f"{name}: a {fmt.name} cache ({bpt} B/token) holds d_qk {fmt.d_qk}, but q has d_qk {d_qk}")
    if t.stride(-1) != 1 or (p > 1 and t.stride(1) != bpt):
        raise ValueError(f"{name}: expected stride(-1) == 1 and stride(1) == bytes_per_token ({bpt}), "
                         f"got strides {t.stride()}")
    if nb > 1 and t.stride(0) < p * bpt:
        raise ValueError(f"{name}: stride(0) must be >= page_block_size * bytes_per_token ({p * bpt}), "
                         f"got {t.stride(0)}")
    return fmt


def slot_indices(t: torch.Tensor, name: str, b: int, s_q: int, capacity: int, device) -> None:
    """Decode indices int32 [b, s_q, topk]: physical slot ids < capacity, negative = invalid."""
    tensor(t, name, (torch.int32,), 3, device)
    if t.shape[0] != b or t.shape[1] != s_q or t.shape[2] < 1:
        raise ValueError(f"{name}: expected shape [{b}, {s_q}, topk >= 1], got {tuple(t.shape)}")
    last_dim_contiguous(t, name)
    if t.numel() and int(t.max()) >= capacity:
        raise ValueError(f"{name}: slot ids must be < num_blocks * page_block_size = {capacity} "
                         f"(negative = invalid), got {int(t.max())}")
