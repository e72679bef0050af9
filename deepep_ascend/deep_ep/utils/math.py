"""Small integer helpers and the reference per-token FP8 cast (per 128 channels, amax/448)."""
from __future__ import annotations

import torch

from deepjit import validation as V


def align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def ceil_div(x: int, y: int) -> int:
    return (x + y - 1) // y


def per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [T, H]`` -> (E4M3 ``[T, H]``, float32 scales ``[T, H/128]``): each 128-channel block is
    scaled so its absolute maximum (at least 1e-4) maps to 448. With ``use_ue8m0`` the scales are
    rounded up to powers of two."""
    t, h = x.shape
    if h % 128:
        raise V.fail("x", "a hidden size (dim 1) that is a multiple of 128", f"shape {tuple(x.shape)}")
    blocks = x.float().view(t, h // 128, 128)
    amax = blocks.abs().amax(dim=2).clamp(min=1e-4)
    scale = amax / 448.0
    if use_ue8m0:
        scale = round_up_to_power_of_two(scale)
    fp8 = (blocks / scale.unsqueeze(2)).to(torch.float8_e4m3fn).view(t, h)
    return fp8, scale


def per_token_cast_back(x_fp8: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Inverse of the cast, in BF16 as upstream's: float32 scales ``[T, ceil(H/128)]`` or int32-packed
    UE8M0 ``[T, ceil(H/512)]``. As upstream, only the scales' order counts, not their shape
    (its low-latency test passes packed words viewed as ``[-1, H/128]``); H need not be a multiple of 128."""
    if x_fp8.numel() == 0:
        return x_fp8.to(torch.bfloat16)
    t, h = x_fp8.shape
    if scales.dtype == torch.int32:
        scales = unpack_ue8m0(scales.reshape(-1, 1))
    blocks = -(-h // 128)
    x = torch.nn.functional.pad(x_fp8.float(), (0, blocks * 128 - h)).view(t, blocks, 128)
    scales = scales.float().reshape(t, -1)[:, :blocks].unsqueeze(2)
    return (x * scales).view(t, blocks * 128)[:, :h].to(torch.bfloat16).contiguous()


def unpack_ue8m0(packed: torch.Tensor) -> torch.Tensor:
    """int32 words holding 4 UE8M0 exponent bytes (low byte first) -> float32 scales ``2^(e-127)``."""
    e = packed.contiguous().reshape(-1).view(torch.uint8).view(*packed.shape[:-1], packed.shape[-1] * 4).to(torch.int32)
    return (e << 23).view(torch.float32)


def round_up_to_power_of_two(scale: torch.Tensor) -> torch.Tensor:
    """Positive float32 -> the next power of two at or above it, exactly (on the bits)."""
    bits = scale.float().view(torch.int32)
    exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).int()
    return (exponent << 23).view(torch.float32)


# ---- test helpers upstream's tests import from here -------------------------------------------
def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - cosine-like similarity of ``x + 1`` and ``y + 1`` in FP64 (0 when equal)."""
    a, b = x.double() + 1, y.double() + 1
    return float(1 - 2 * (a * b).sum() / (a * a + b * b).sum())


def safe_div(a, b) -> float:
    """``a / b``, with ``0 / 0 == 0``."""
    if b == 0 and a == 0:
        return 0
    return a / b


def inplace_unique(x: torch.Tensor, num_slots: int) -> None:
    """Each row of ``x`` (ids in ``[0, num_slots)``, -1 for none) replaced in place by its distinct
    ids, largest first, then -1."""
    if x.dim() != 2:
        raise V.fail("x", "a 2-D tensor", f"shape {tuple(x.shape)}")
    present = torch.zeros(x.shape[0], num_slots + 1, dtype=torch.bool, device=x.device)
    present.scatter_(1, x.masked_fill(x < 0, num_slots).long(), True)
    ids = torch.arange(num_slots, device=x.device, dtype=x.dtype).expand(x.shape[0], -1)
    distinct = torch.where(present[:, :num_slots], ids, -1).sort(dim=1, descending=True).values
    width = min(num_slots, x.shape[1])
    x.fill_(-1)
    x[:, :width] = distinct[:, :width]


def create_grouped_scores(scores: torch.Tensor, group_idx: torch.Tensor, num_groups: int) -> torch.Tensor:
    """``scores`` with every expert outside each token's selected groups zeroed."""
    T, E = scores.shape
    keep = torch.zeros(T, num_groups, dtype=torch.bool, device=scores.device).scatter_(1, group_idx, True)
    return (scores.view(T, num_groups, -1) * keep[:, :, None]).view(T, E)


def hash_tensor(t: torch.Tensor) -> int:
    """The sum of ``t``'s bytes read as int32 words (a cheap fingerprint)."""
    return int(t.view(torch.int).sum())


def hash_tensors(*tensors) -> int:
    """XOR of ``hash_tensor`` over tensors (nested tuples and lists too; None skipped)."""
    value = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            value ^= hash_tensors(*t)
        elif isinstance(t, torch.Tensor):
            value ^= hash_tensor(t)
    return value


def count_bytes(*tensors) -> int:
    """Total bytes of the tensors (nested tuples and lists too; None skipped)."""
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total
