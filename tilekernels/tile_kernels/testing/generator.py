"""Test-data generators following upstream's grids (CPU tensors, seeded by the caller)."""
from __future__ import annotations

import os
import random
from collections.abc import Iterable

import torch

from ..utils import align


def _full() -> bool:
    return os.getenv("TK_FULL_TEST") in ("1", "true", "True")


def generate_num_tokens(alignment: int = 1, is_benchmark: bool = False) -> list[int]:
    base = [4001, 8001]
    return [align(t, alignment) for t in ([0] + base if _full() and not is_benchmark else base)]


def generate_hidden_sizes(align: int = 64) -> list[int]:
    return [h for h in (576, 2048, 2560, 3072, 4096, 6144, 7168) if h % align == 0]


def generate_num_sms() -> list[int]:
    from ..config import get_device_num_sms
    n = get_device_num_sms()
    base = sorted({max(1, n - 1), n})
    return [1] + base if _full() and 1 not in base else base


def generate_moe_params(is_benchmark: bool = False) -> Iterable[dict]:
    full = _full()
    if full and not is_benchmark:
        yield {"num_send_tokens": 0, "num_topk": 1, "num_experts": 1, "num_ep_ranks": 1}
    for num_topk in (2, 6, 8, 9) + ((1, 7) if full else ()):
        for num_experts in (72, 256) + ((288, 384) if full else ()):
            for ep in (8, 64) + ((1, 72, 256) if full else ()):
                if num_experts % ep == 0:
                    yield {"num_send_tokens": 4001, "num_topk": num_topk, "num_experts": num_experts // ep,
                           "num_ep_ranks": ep}


def generate_topk_idx(params: dict, device="cpu") -> torch.Tensor:
    """Random routing over all EP ranks' experts seen from rank 0: non-local experts become -1 and
    rows with no local expert are dropped."""
    t, e, k, ep = params["num_send_tokens"], params["num_experts"], params["num_topk"], params["num_ep_ranks"]
    if t == 0:
        return torch.empty((0, k), dtype=torch.int64, device=device)
    scores = torch.rand((t * ep, e * ep), device=device).bfloat16()
    idx = torch.topk(scores.float(), k, dim=-1, sorted=False).indices
    idx[idx >= e] = -1
    return idx[~(idx < 0).all(1)].contiguous()


E5M6_SPECIAL_VALUES = (2.0 ** -20, 2.0 ** -14 * 63 / 64, 2.0 ** -14)


def generate_e5m6_inputs(num_tokens: int, hidden: int, dtype: torch.dtype, device="cpu"):
    """A random tensor, then tensors at E5M6 edge values (last column at the maximum 65024)."""
    yield torch.randn((num_tokens, hidden), dtype=dtype, device=device), False
    for value in E5M6_SPECIAL_VALUES:
        x = torch.full((num_tokens, hidden), value, dtype=dtype, device=device)
        x[:, -1] = 65024.0
        yield x, True


def generate_rand_float(shape: tuple, device="cpu") -> torch.Tensor:
    """randn scaled by 2^U[-110, 126], non-finite values redrawn, clamped to +-FLT_MAX/8."""
    x = torch.randn(shape, device=device) * float(2.0 ** random.randint(-110, 126))
    bad = ~torch.isfinite(x)
    if bad.any():
        x[bad] = torch.randn(int(bad.sum()), device=device)
    m = torch.finfo(torch.float32).max / 8
    return x.clamp(-m, m)
