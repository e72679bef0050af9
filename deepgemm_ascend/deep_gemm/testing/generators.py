"""Seeded inputs in upstream's test style: BF16 random data, quantised operands, FP32 references.

References come from the original BF16 values (not from the dequantised operands), as upstream's
accuracy thresholds assume. ``kind`` names the operand formats and granularities:

| kind       | A                          | B                          | recipe                          |
|------------|----------------------------|----------------------------|---------------------------------|
| fp8        | FP8 per-token 1x128        | FP8 per-block 128x128      | default (1, 128, 128)           |
| fp8_1d1d   | FP8 per-token 1x128        | FP8 per-token 1x128        | (1, 1, 128)                     |
| fp8_mx     | FP8 per-token 1x32         | FP8 per-token 1x32         | (1, 1, 32)                      |
| fp8xfp4    | FP8 per-token 1x128        | FP4 per-token 1x32         | recipe_a (1, 128), recipe_b (1, 32) |
| fp4        | FP4 per-token 1x32         | FP4 per-token 1x32         | (1, 1, 32)                      |
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from ..runtime import get_mk_alignment_for_contiguous_layout
from ..utils.math import (
    align,
    per_block_cast_to_fp8,
    per_channel_cast_to_fp8,
    per_token_cast_to_fp4,
    per_token_cast_to_fp8,
    transpose_packed_fp4,
)

KINDS = ("fp8", "fp8_1d1d", "fp8_mx", "fp8xfp4", "fp4")
# (A is FP4, A gran_k, B is FP4, B gran_k, B per-block, use_ue8m0, recipe kwargs)
_KIND_SPECS = {
    "fp8": (False, 128, False, 128, True, False, {}),
    "fp8_1d1d": (False, 128, False, 128, False, True, {"recipe": (1, 1, 128)}),
    "fp8_mx": (False, 32, False, 32, False, True, {"recipe": (1, 1, 32)}),
    "fp8xfp4": (False, 128, True, 32, False, True, {"recipe_a": (1, 128), "recipe_b": (1, 32)}),
    "fp4": (True, 32, True, 32, False, True, {"recipe": (1, 1, 32)}),
}
THRESHOLDS = {"fp8": 1e-3, "fp8_1d1d": 1e-3, "fp8_mx": 1e-3, "fp8xfp4": 0.01, "fp4": 0.02, "bf16": 1e-5}


def reset_seed(seed: int = 0) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def randn(*shape, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float32).to(dtype)


def recipe_kwargs(kind: str) -> dict:
    return dict(_KIND_SPECS[kind][6])


def threshold(kind: str) -> float:
    return THRESHOLDS[kind]


def cast_operand(x: torch.Tensor, fp4: bool, gran_k: int, per_block: bool, use_ue8m0: bool,
                 mn_major: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise a BF16 ``[MN, K]`` operand; MN-major keeps the ``[MN, K]`` logical view (FP4: ``[MN/2, K]``)."""
    if fp4:
        q, sf = per_token_cast_to_fp4(x, use_ue8m0=use_ue8m0, gran_k=gran_k)
        return (transpose_packed_fp4(q).t() if mn_major else q), sf
    q, sf = (per_block_cast_to_fp8 if per_block else per_token_cast_to_fp8)(x, use_ue8m0=use_ue8m0, gran_k=gran_k)
    return (q.t().contiguous().t() if mn_major else q), sf


def cast_grouped_operand(x: torch.Tensor, fp4: bool, gran_k: int, per_block: bool, use_ue8m0: bool,
                         mn_major: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group :func:`cast_operand` of ``[G, MN, K]``; MN-major stays dense per group."""
    parts = [cast_operand(x[g], fp4, gran_k, per_block, use_ue8m0) for g in range(x.size(0))]
    q = torch.stack([p[0] for p in parts])
    sf = torch.stack([p[1] for p in parts])
    if mn_major:
        if fp4:
            q = torch.stack([transpose_packed_fp4(p[0]) for p in parts]).transpose(1, 2)
        else:
            q = q.transpose(1, 2).contiguous().transpose(1, 2)
    return q, sf


@dataclass
class NormalCase:
    a: object
    b: object
    c: torch.Tensor | None
    d: torch.Tensor
    ref_d: torch.Tensor
    kwargs: dict = field(default_factory=dict)


def generate_normal(m: int, n: int, k: int, kind: str = "fp8", a_mn_major: bool = False, b_mn_major: bool = False,
                    accumulate: bool = False, out_dtype: torch.dtype = torch.bfloat16) -> NormalCase:
    """Dense ``nt`` operands; ``kind="bf16"`` gives plain BF16 operands."""
    a, b = randn(m, k), randn(n, k)
    c = randn(m, n, dtype=out_dtype) * 32 if accumulate else None
    d = torch.empty(m, n, dtype=out_dtype)
    ref = a.float() @ b.float().t() + (c.float() if c is not None else 0)
    if kind == "bf16":
        qa = a.t().contiguous().t() if a_mn_major else a
        qb = b.t().contiguous().t() if b_mn_major else b
        return NormalCase(qa, qb, c, d, ref.to(out_dtype))
    fa, gka, fb, gkb, b_block, ue8m0, kwargs = _KIND_SPECS[kind]
    qa = cast_operand(a, fa, gka, False, ue8m0, a_mn_major)
    qb = cast_operand(b, fb, gkb, b_block, ue8m0, b_mn_major)
    return NormalCase(qa, qb, c, d, ref.to(out_dtype), dict(kwargs))


def grouped_sizes(num_groups: int, expected_m: int, alignment: int, allow_empty: bool = False) -> tuple[list[int], list[int]]:
    """Upstream's draw: ``int(expected * U(0.7, 1.3))`` rows per group, and those sizes aligned."""
    actual = [int(expected_m * random.uniform(0.7, 1.3)) for _ in range(num_groups)]
    if allow_empty and num_groups > 1:
        actual[random.randrange(num_groups)] = 0
    return actual, [align(x, alignment) for x in actual]


@dataclass
class MGroupedCase:
    a: object
    b: object
    grouped_layout: torch.Tensor
    d: torch.Tensor
    ref_d: torch.Tensor
    valid_rows: list[tuple[int, int]]
    kwargs: dict = field(default_factory=dict)


def generate_m_grouped_contiguous(num_groups: int, expected_m: int, n: int, k: int, kind: str = "fp8",
                                  use_psum_layout: bool = False, b_mn_major: bool = False,
                                  psum_form: str = "end_rows") -> MGroupedCase:
    """A ``[M, K]`` with each group's rows padded to the alignment (padding rows zero), B ``[G, N, K]``."""
    alignment = get_mk_alignment_for_contiguous_layout()
    actual, aligned = grouped_sizes(num_groups, expected_m, alignment)
    m = sum(aligned)
    a, b = randn(m, k), randn(num_groups, n, k)
    ref = torch.zeros(m, n, dtype=torch.float32)
    m_indices = torch.full((m,), -1, dtype=torch.int32)
    ends, valid, start = [], [], 0
    for g, (rows, padded) in enumerate(zip(actual, aligned, strict=True)):
        a[start + rows:start + padded] = 0
        m_indices[start:start + rows] = g
        ref[start:start + rows] = a[start:start + rows].float() @ b[g].float().t()
        valid.append((start, start + rows))
        ends.append(start + rows)
        start += padded
    if use_psum_layout:
        layout = torch.tensor(actual if psum_form == "counts" else ends, dtype=torch.int32)
    else:
        layout = m_indices
    d = torch.empty(m, n, dtype=torch.bfloat16)
    if kind == "bf16":
        qb = b.transpose(1, 2).contiguous().transpose(1, 2) if b_mn_major else b
        return MGroupedCase(a, qb, layout, d, ref.bfloat16(), valid)
    fa, gka, fb, gkb, b_block, ue8m0, kwargs = _KIND_SPECS[kind]
    qa = cast_operand(a, fa, gka, False, ue8m0)
    qb = cast_grouped_operand(b, fb, gkb, b_block, ue8m0, b_mn_major)
    return MGroupedCase(qa, qb, layout, d, ref.bfloat16(), valid, dict(kwargs))


@dataclass
class MaskedCase:
    a: object
    b: object
    masked_m: torch.Tensor
    expected_m: int
    d: torch.Tensor
    ref_d: torch.Tensor
    kwargs: dict = field(default_factory=dict)


def generate_m_grouped_masked(num_groups: int, max_m: int, expected_m: int, n: int, k: int,
                              kind: str = "fp8") -> MaskedCase:
    a, b = randn(num_groups, max_m, k), randn(num_groups, n, k)
    masked_m = torch.tensor([min(max_m, int(expected_m * random.uniform(0.7, 1.3))) for _ in range(num_groups)],
                            dtype=torch.int32)
    ref = torch.einsum("gmk,gnk->gmn", a.float(), b.float()).bfloat16()
    d = torch.empty(num_groups, max_m, n, dtype=torch.bfloat16)
    expected = max(1, int(expected_m * 1.2))
    if kind == "bf16":
        return MaskedCase(a, b, masked_m, expected, d, ref)
    fa, gka, fb, gkb, b_block, ue8m0, kwargs = _KIND_SPECS[kind]
    qa = cast_grouped_operand(a, fa, gka, False, ue8m0)
    qb = cast_grouped_operand(b, fb, gkb, b_block, ue8m0)
    return MaskedCase(qa, qb, masked_m, expected, d, ref, dict(kwargs))


def k_grouped_per_channel_cast_to_fp8(x: torch.Tensor, ks: list[int], ends: list[int], use_ue8m0: bool,
                                      gran_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each group's K rows ``[end - k, end)`` of ``x [K_total, MN]`` separately; SF rows stay compact."""
    q = torch.zeros(x.shape, dtype=torch.float8_e4m3fn)
    sfs = []
    for k, end in zip(ks, ends, strict=True):
        if k == 0:
            continue
        block = torch.zeros(align(k, gran_k), x.size(1), dtype=x.dtype)
        block[:k] = x[end - k:end]
        bq, bsf = per_channel_cast_to_fp8(block, use_ue8m0=use_ue8m0, gran_k=gran_k)
        q[end - k:end] = bq[:k]
        sfs.append(bsf)
    sf = torch.cat(sfs) if sfs else torch.empty(0, x.size(1))
    return q, sf


@dataclass
class KGroupedCase:
    a: object
    b: object
    c: torch.Tensor
    d: torch.Tensor
    ref_d: torch.Tensor
    ks_cpu: list[int] | None
    grouped_layout: torch.Tensor


def generate_k_grouped_contiguous(num_groups: int, m: int, n: int, real_ks: list[int], kind: str = "fp8",
                                  gran_k: int = 128, use_psum_layout: bool = False, use_ue8m0: bool = True) -> KGroupedCase:
    """A ``[K_total, M]``, B ``[K_total, N]`` (MN-major), C = D FP32 ``[G, M, N]``.

    Without psum every group's K is aligned (``ks_cpu``); with psum groups hold ``real_ks`` rows
    starting at aligned offsets and ``grouped_layout`` holds the end offsets."""
    alignment = get_mk_alignment_for_contiguous_layout()
    aligned = [align(k, alignment) for k in real_ks]
    if use_psum_layout:
        ends, prev = [], 0
        for k in real_ks:
            prev = align(prev, alignment) + k
            ends.append(prev)
        ks, total = list(real_ks), align(ends[-1], alignment) if ends else 0
        layout = torch.tensor(ends, dtype=torch.int32)
        ks_cpu = aligned
    else:
        ks, ends, acc = aligned, [], 0
        for k in aligned:
            acc += k
            ends.append(acc)
        total, layout, ks_cpu = acc, torch.tensor(aligned, dtype=torch.int32), aligned
    a, b = torch.zeros(total, m, dtype=torch.bfloat16), torch.zeros(total, n, dtype=torch.bfloat16)
    for k, end in zip(ks, ends, strict=True):
        a[end - k:end], b[end - k:end] = randn(k, m), randn(k, n)
    c = torch.randn(num_groups, m, n) * 32
    ref = c.clone()
    for g, (k, end) in enumerate(zip(ks, ends, strict=True)):
        ref[g] += a[end - k:end].float().t() @ b[end - k:end].float()
    d = c.clone()
    if kind == "bf16":
        return KGroupedCase(a, b, d, d, ref, ks_cpu, layout)
    qa = k_grouped_per_channel_cast_to_fp8(a, ks, ends, use_ue8m0, gran_k)
    qb = k_grouped_per_channel_cast_to_fp8(b, ks, ends, use_ue8m0, gran_k)
    return KGroupedCase(qa, qb, d, d, ref, ks_cpu, layout)
