"""Row permutations within groups (kernel in host/permute_rows.cpp)."""
from __future__ import annotations

import torch

from ._lib import kernel, threads


def permute_rows(t: torch.Tensor, perm: torch.Tensor, num_threads: int | None = None) -> torch.Tensor:
    """``out[g, i] = t[g, perm[i]]`` for ``t [G, N, ...]`` (any dtype) and int64 ``perm [N]``, a new tensor."""
    src = t.contiguous()
    out = torch.empty_like(src)
    groups, rows = src.shape[:2]
    if out.numel():
        kernel("dg_permute_rows", "host/permute_rows.cpp")(out, src, perm.contiguous(), groups, rows,
                                                           src[0, 0].numel() * src.element_size(), threads(num_threads))
    return out
