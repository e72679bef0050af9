"""Ascend K-grouped MX FP8 GEMM (MoE weight gradient): ``bf16_gemm_epilogue.asc`` with ``DG_MX`` and
``DG_K_GROUPED`` behind ``k_grouped_fp8_gemm_tn_contiguous`` (and the deprecated ``nt`` form, which
forwards to it).

Entry point (for the dispatch table's Ascend column; the canonical arguments of
``deep_gemm.reference.k_grouped_fp8_gemm_tn``, already validated by ``deep_gemm.k_grouped``)::

    k_grouped_fp8_gemm_tn_contiguous(a, sfa, b, sfb, d, c, groups, gran_k, compiled_dims="mn") -> None

- ``a`` ``[sum_K, M]`` and ``b`` ``[sum_K, N]`` E4M3 (MN-major, loaded DN->NZ); ``sfa`` / ``sfb`` FP32
  per-channel scales, ``ceil(k_g / gran_k)`` rows per group from ``groups.sf_starts`` (gran_k 32 or
  128; zero mantissa required, see ``fp8_mx_gemm.py``); ``d`` and ``c`` ``[G, M, N]`` FP32, ``c`` may
  be ``d``: ``d[g] = c[g] + deq(a)[s:e].T @ deq(b)[s:e]`` over group g's K rows from ``groups``
  (host lists from ``ks_cpu``, or with the psum layout and no ``ks_cpu`` device tensors derived from
  ``grouped_layout``; either way the kernel's ``(start, rows)`` table and the scale index are built
  with tensor ops, and no device value is read on the host).
- The per-group scale rows become one Ascend-layout scale matrix (int16 UE8M0 pairs, MN-major) of
  ``ceil(K / 64) + G`` pairs, group-local: group g's pairs follow group g - 1's, pair p covering its K
  rows ``[64p, 64p + 64)`` (each 32-block takes its row ``sf_start + 32 j // gran_k``, the rest 2^0). The
  kernel loads a group's data from its first K row and its scales from its first pair, so a group may
  start at any K row (a partial first K tile where it is off the 64-row grid).
- A group with no K rows has no cube work: ``d[g] = c[g]`` is copied by the kernel's vector cores when
  ``c`` is not ``d``.
"""
from __future__ import annotations

import torch

from ._launch import args, kernel, m_blocks, n_blocks, num_cube_cores, shape_defines
from .fp8_mx_gemm import MX_GRAN_K, ascend_scales, check_mantissa, layout

PAIR_K = 64


def _clamped(groups, k_total: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rows, starts, sf_starts)`` with the kernel's clamps (bf16_gemm_epilogue.asc ``k_group``): start in
    ``[0, K]``, rows in ``[0, K - start]``; tensor ops only."""
    ks, starts, sf_starts = groups.tensors(device)
    starts = starts.clamp(0, k_total)
    return torch.minimum(ks.clamp(min=0), k_total - starts), starts, sf_starts


def _block_scales(sf: torch.Tensor, k_total: int, groups, gran_k: int) -> torch.Tensor:
    """Per-group scale rows ``[S, MN]`` -> FP32 scales per 32 K rows ``[MN, 2 * (ceil(K / 64) + G)]``, group-local
    and packed (see the module docstring), gathered on the device: 32-block j of group g's pairs takes its row
    ``sf_start + 32 j // gran_k`` inside the group, the padding row 2^0 elsewhere."""
    rows, _, sf_starts = _clamped(groups, k_total, sf.device)
    pairs = -(-rows // PAIR_K)
    ends = torch.cumsum(pairs, 0)
    firsts = ends - pairs
    blocks = torch.arange(2 * (-(-k_total // PAIR_K) + rows.numel()), device=sf.device)
    g = torch.searchsorted(ends, blocks // 2, right=True).clamp(max=max(ends.numel() - 1, 0))
    if ends.numel():
        local = (blocks - 2 * firsts[g]) * MX_GRAN_K
        inside = (blocks // 2 < ends[g]) & (local < rows[g])
        # clamped: scale rows short of the groups' (checked only with DG_ASCEND_CHECKS=1) read the padding row
        index = torch.where(inside, sf_starts[g] + local // gran_k, sf.size(0)).clamp(max=sf.size(0))
    else:
        index = torch.full_like(blocks, sf.size(0))
    padded = torch.cat([sf.float(), torch.ones((1, sf.size(1)), dtype=torch.float32, device=sf.device)])
    return padded[index].t()


def k_grouped_fp8_gemm_tn_contiguous(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                                     d: torch.Tensor, c: torch.Tensor, groups, gran_k: int,
                                     compiled_dims: str = "mn") -> None:
    g, m, n = d.shape
    if g == 0 or m == 0 or n == 0:
        return
    check_mantissa("a[1]", sfa)
    check_mantissa("b[1]", sfb)
    if groups.on_host and not any(groups.ks) and c.data_ptr() == d.data_ptr():
        return
    k_total = a.size(0)
    k_scaled = PAIR_K * (-(-k_total // PAIR_K) + g)  # the K span of the group-local scale pairs
    sfa16 = ascend_scales(_block_scales(sfa, k_total, groups, gran_k), m, k_scaled)
    sfb16 = ascend_scales(_block_scales(sfb, k_total, groups, gran_k), n, k_scaled)
    at, bt = a.t(), b.t()  # the [M, K] / [N, K] operand views the nt core reads
    a_mn, lda = layout(at)
    b_mn, ldb = layout(bt)
    defines = {"DG_MX": 1, "DG_A_MN_MAJOR": int(a_mn), "DG_B_MN_MAJOR": int(b_mn), "DG_D_FP32": 1, "DG_HAS_C": 1,
               "DG_K_GROUPED": 1, **shape_defines(compiled_dims.replace("k", ""), m=m, n=n)}
    ks, k_starts, _ = groups.tensors(d.device)
    k_groups = torch.stack([k_starts, ks], 1).to(torch.int32)  # (start, rows) per group, read by the kernel
    grid = min(g * m_blocks(m) * n_blocks(n), num_cube_cores(d))
    kernel("dg_bf16_gemm_epilogue", "ascend/bf16_gemm_epilogue.asc", defines)(
        grid, args("DgBf16GemmEpilogueArgs", a=at, b=bt, d=d, c=c, k_groups=k_groups, num_groups=g, m=m, n=n,
                   k=k_total, lda=lda, ldb=ldb, ldd=d.stride(1), ldc=c.stride(1), d_group_stride=d.stride(0),
                   c_group_stride=c.stride(0), alpha=1.0, sfa=sfa16, sfb=sfb16, ld_sfa=sfa16.stride(-1),
                   ld_sfb=sfb16.stride(-1)))
