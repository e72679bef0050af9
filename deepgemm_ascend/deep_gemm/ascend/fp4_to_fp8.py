"""Ascend FP4 -> FP8 widening on the vector cores (``fp4_to_fp8.asc``): the FP4 side of an FP8 x FP4
(or MN-major FP4) MX GEMM becomes E4M3 with the same per-32 UE8M0 scales, exactly.

Entry point::

    widen(data) -> torch.Tensor

- ``data``: packed E2M1 (int8 or float4_e2m1fn_x2), ``[.., MN, K/2]`` K-major or ``[.., MN/2, K]``
  MN-major (packed along its contiguous axis). Returns E4M3 ``[.., MN, K]`` with the same major
  (a new tensor, written only by the kernel); CPU tensors run on the twin.
"""
from __future__ import annotations

import torch

from ._launch import args, kernel, num_cube_cores

ROWS, CHUNK = 8, 4096   # the kernel's tile: rows x input bytes


def widen(data: torch.Tensor) -> torch.Tensor:
    mn_major = data.stride(-1) != 1
    rows_view = data.transpose(-1, -2) if mn_major else data   # the contiguous axis last
    lead = rows_view.shape[:-1]
    flat = rows_view.reshape(-1, rows_view.size(-1))          # a view for the dense operands the ops take
    out = torch.empty(flat.size(0), 2 * flat.size(1), dtype=torch.float8_e4m3fn, device=data.device)
    if out.numel():
        tiles = -(-flat.size(0) // ROWS) * -(-flat.size(1) // CHUNK)
        kernel("dg_fp4_to_fp8", "ascend/fp4_to_fp8.asc", {})(
            min(tiles, 2 * num_cube_cores(data)),
            args("DgFp4ToFp8Args", src=flat.view(torch.uint8), dst=out.view(torch.uint8), rows=flat.size(0),
                 cols=flat.size(1), ld_src=flat.stride(0), ld_dst=out.stride(0)))
    out = out.view(*lead, out.size(-1))
    return out.transpose(-1, -2) if mn_major else out
