"""flash_mla's argument checks: deepjit's shared ones (``deepjit.validation``: arguments
``(name, value, ...)``, messages ``"<name>: expected <what>, got <what came>"``) and the attention
and KV-cache rules built on them. Each raises before any work."""
from __future__ import annotations

from collections.abc import Iterable

import torch

from deepjit import validation as V
from deepjit.validation import contiguous, last_stride_one, shape

from ._operands import KVCacheFormat

CACHE_DTYPES = (torch.float8_e4m3fn, torch.int8, torch.uint8)
SUPPORTED_H_Q = (64, 128)
SUPPORTED_D_QK = (576, 512)
D_V = 512


def tensor(name: str, t, dtypes: Iterable[torch.dtype], ndim: int, device: torch.device | None = None,
           optional: bool = False) -> None:
    """``device``, where given, is q's: the one every other tensor of an op must share."""
    if t is None and optional:
        return
    V.tensor(name, t, dtypes=dtypes, ndim=ndim, device=device, like="q" if device is not None else None)


def one_of(name: str, value, allowed: tuple) -> None:
    V.choice(name, value, allowed)


def real_number(name: str, value) -> float:
    return V.number(name, value, finite=True)


def flag(name: str, value) -> bool:
    return V.boolean(name, value, allow_int=True)


def host_values(t: torch.Tensor) -> bool:
    """Whether the values of ``t`` may be checked here: CPU tensors only. A device tensor is never read
    on the host (no sync, graph capture stays possible); the kernels clamp what they read instead."""
    return t.device.type == "cpu"


def lengths(name: str, t: torch.Tensor | None, n: int, limit: int, device, values: bool = True) -> None:
    """An optional int32 [n] length vector with values in [0, limit] (checked where ``values``)."""
    if t is None:
        return
    tensor(name, t, (torch.int32,), 1, device)
    shape(name, t, (n,))
    contiguous(name, t)
    if values and n and (int(t.min()) < 0 or int(t.max()) > limit):
        raise V.fail(name, f"values in [0, {limit}]", f"range [{int(t.min())}, {int(t.max())}]")


def attn_sink(t: torch.Tensor | None, h_q: int, device) -> None:
    if t is None:
        return
    tensor("attn_sink", t, (torch.float32,), 1, device)
    shape("attn_sink", t, (h_q,))
    contiguous("attn_sink", t)


def quantized_cache(name: str, t: torch.Tensor, d_qk: int, device) -> KVCacheFormat:
    """A [num_blocks, page_block_size, 1, bytes_per_token] byte cache matching d_qk; its format."""
    tensor(name, t, CACHE_DTYPES, 4, device)
    fmt = KVCacheFormat.from_bytes_per_token(t.shape[-1], name)
    nb, p, h_k, bpt = t.shape
    if h_k != 1:
        raise V.fail(name, "num_heads_k (dim 2) 1 (MQA)", h_k)
    if p < 1:
        raise V.fail(name, "page_block_size (dim 1) >= 1", p)
    if fmt.d_qk != d_qk:
        raise V.fail(name, f"a cache holding q's d_qk {d_qk}", f"a {fmt.name} cache ({bpt} B/token) that holds d_qk {fmt.d_qk}")
    if t.stride(-1) != 1 or (p > 1 and t.stride(1) != bpt):
        raise ValueError(f"{name}: expected stride(-1) == 1 and stride(1) == bytes_per_token ({bpt}), "
                         f"got strides {t.stride()}")
    if nb > 1 and t.stride(0) < p * bpt:
        raise V.fail(name, f"stride(0) >= page_block_size * bytes_per_token ({p * bpt})", t.stride(0))
    return fmt


def slot_indices(name: str, t: torch.Tensor, b: int, s_q: int, capacity: int, device) -> None:
    """Decode indices int32 [b, s_q, topk]: physical slot ids < capacity, negative = invalid."""
    tensor(name, t, (torch.int32,), 3, device)
    if t.shape[0] != b or t.shape[1] != s_q or t.shape[2] < 1:
        raise ValueError(f"{name}: expected shape [{b}, {s_q}, topk >= 1], got {tuple(t.shape)}")
    last_stride_one(name, t)
    if t.numel() and int(t.max()) >= capacity:
        raise V.fail(name, f"slot ids < num_blocks * page_block_size = {capacity} (negative = invalid)", int(t.max()))
