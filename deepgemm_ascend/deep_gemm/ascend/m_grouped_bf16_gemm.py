"""Ascend M-grouped BF16 GEMMs: the cube kernel ``m_grouped_bf16_gemm.asc`` behind
``m_grouped_bf16_gemm_{nt,nn}_contiguous`` (psum and ``m_indices`` layouts) and ``m_grouped_bf16_gemm_nt_masked``; the
MX FP8/FP4 forms of the same kernel are launched from ``m_grouped_fp8_mx_gemm.py`` through ``launch``.

Entry points (for the dispatch table's Ascend column; the canonical arguments of
``deep_gemm.reference.m_grouped_bf16_gemm_nt`` / ``..._nt_masked``, already validated by
``deep_gemm.grouped``)::

    m_grouped_bf16_gemm_nt_contiguous(a, b, d, rows, zero_padding, compiled_dims="nk") -> None
    m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, compiled_dims="nk") -> None

- Contiguous: ``a`` ``[M, K]`` BF16 K-major; ``b`` ``[G, N, K]`` BF16, K-major or MN-major (``nn``
  passes ``b.transpose(1, 2)``); ``d`` ``[M, N]`` BF16 or FP32, row-major, written in place.
  ``rows`` a ``GroupedRows``; psum (``use_psum_layout=True``): ``rows.layout`` int32 ``[G]`` exclusive
  end rows (device memory, read by the kernel, never by the host), ``rows.alignment`` the group
  start alignment. ``D[rows of g] = A[rows of g] @ B[g].T`` with FP32 accumulation; zero-sized
  groups are skipped in the kernel.
- ``zero_padding`` (``ensure_zero_padding``): rows outside every group are written as zero by the kernel
  itself (``DG_ZERO_PADDING``: zero tiles over each group's padding, so every row of D is written
  once); otherwise they keep what they held. DeepGEMM-Ascend's kernel writes group rows only and
  leaves the padding to the caller; the zero rows follow this package's documented semantics.
- Masked: ``a`` ``[G, M_max, K]``, ``b`` ``[G, N, K]`` K-major, ``d`` ``[G, M_max, N]``;
  ``masked_m`` int32 ``[G]`` is read by the kernel only (clamped to ``[0, M_max]``): rows
  ``< masked_m[g]`` of ``d[g]`` are written, the others keep what they held.
- ``m_indices`` (``use_psum_layout=False``, ``DG_INDEXED``): ``rows.layout`` int32 ``[M]``, each row
  labelled with its block's group as ``deep_gemm.grouped`` labels them (a block is ``rows.alignment``
  rows, computed with its first row's group; -1 where not computed), read by the kernel only. An M
  tile lies in one block; a block whose first row is -1 (or, without the debug checks, a group id
  outside ``[0, G)``) is skipped, written as zero with ``zero_padding``, which also zeroes the -1 rows
  of computed blocks.
"""
from __future__ import annotations

import torch

from ._launch import (
    BLOCK_M,
    WIDE_BLOCK_M,
    args,
    cube_block_m,
    kernel,
    m_blocks,
    n_blocks,
    num_cube_cores,
    shape_defines,
)

ENTRY = ("dg_m_grouped_bf16_gemm", "ascend/m_grouped_bf16_gemm.asc")


def launch(a, b, d, layout, m: int, n: int, k: int, g: int, alignment: int, strides: dict, defines: dict,
           tiles: int, sfa=None, sfb=None, entry: tuple[str, str] = ENTRY) -> None:
    """One launch of ``dg_m_grouped_bf16_gemm`` (or ``entry``, a kernel with the same arguments and tile walk:
    ``m_grouped_fp8_fp4_mx_gemm.asc``). ``strides``: lda, ldb, ldd and the group strides (a, b, d, sfa,
    sfb; 0 where an operand is shared), ld_sfa / ld_sfb with MX scales. ``tiles``: a bound on the output
    tiles at 128 rows (the grid: at most one block per tile, per cube core)."""
    cores = num_cube_cores(d)
    block_m = cube_block_m(m * (g if defines.get("DG_MASKED") else 1), n, cores)
    if defines.get("DG_INDEXED") and alignment % WIDE_BLOCK_M:
        block_m = BLOCK_M  # an m_indices tile ends at its block: a wide one would compute a 128-row block at most
    kernel(*entry, {**defines, "DG_BLOCK_M": block_m})(
        min(tiles, cores), args("DgMGroupedGemmArgs", **fields(a, b, d, layout, m, n, k, g, alignment, strides, sfa, sfb)))


def fields(a, b, d, layout, m: int, n: int, k: int, g: int, alignment: int, strides: dict, sfa=None, sfb=None) -> dict:
    """``DgMGroupedGemmArgs``'s fields for ``launch``'s arguments (also one layer of Mega MoE's persistent kernel)."""
    s = {"a_group": 0, "d_group": 0, "ld_sfa": 0, "ld_sfb": 0, "sfa_group": 0, "sfb_group": 0, **strides}
    return dict(a=a, b=b, d=d, layout=layout, m=m, n=n, k=k, num_groups=g, alignment=alignment, lda=s["lda"],
                ldb=s["ldb"], b_group_stride=s["b_group"], ldd=s["ldd"], a_group_stride=s["a_group"],
                d_group_stride=s["d_group"], sfa=d if sfa is None else sfa, sfb=d if sfb is None else sfb,
                ld_sfa=s["ld_sfa"], ld_sfb=s["ld_sfb"], sfa_group_stride=s["sfa_group"], sfb_group_stride=s["sfb_group"])


def contiguous_layout(rows, m: int, device) -> tuple[torch.Tensor, dict, int]:
    """(the int32 layout the kernel reads, its defines, a bound on the launch's M tiles that needs no look
    at the layout: psum tiles of group rows and padding, or ``m_indices`` blocks' tiles) for ``rows``,
    checked against M before a launch."""
    if not isinstance(rows.alignment, int) or rows.alignment < 1:
        raise ValueError(f"alignment: expected a positive int, got {rows.alignment!r}")
    # psum: one end per group (its count is checked against B's groups where the layout is parsed); m_indices: one
    # group id per row of A
    wrong_length = not rows.use_psum_layout and rows.layout.numel() != m
    if rows.layout.dim() != 1 or wrong_length or rows.layout.dtype != torch.int32:
        want = "G" if rows.use_psum_layout else m
        raise ValueError(f"grouped_layout: expected int32 [{want}], got {rows.layout.dtype} {tuple(rows.layout.shape)}")
    layout = rows.layout.to(device=device).contiguous()
    if rows.use_psum_layout:
        return layout, {}, m_blocks(m) + 2 * layout.numel()
    return layout, {"DG_INDEXED": 1}, -(-m // rows.alignment) * m_blocks(rows.alignment)


def _b_layout(b: torch.Tensor) -> tuple[bool, int]:
    mn_major = b.stride(-1) != 1
    return mn_major, b.stride(-1) if mn_major else b.stride(-2)


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, rows, zero_padding: bool,
                                      compiled_dims: str = "nk") -> None:
    m, k = a.shape
    g, n, _ = b.shape
    if m == 0 or n == 0:
        return
    if k == 0 or g == 0:  # an empty product: zero rows (the public wrappers never get here)
        d.masked_fill_(((rows.row_group >= 0) | zero_padding)[:, None], 0)
        return
    layout, layout_defines, m_tiles = contiguous_layout(rows, m, d.device)
    b_mn, ldb = _b_layout(b)
    defines = {"DG_B_MN_MAJOR": int(b_mn), "DG_D_FP32": int(d.dtype == torch.float32),
               "DG_ZERO_PADDING": int(zero_padding), **layout_defines, **shape_defines(compiled_dims, n=n, k=k)}
    launch(a, b, d, layout, m, n, k, g, rows.alignment,
           {"lda": a.stride(0), "ldb": ldb, "b_group": b.stride(0), "ldd": d.stride(0)}, defines, m_tiles * n_blocks(n))


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                  compiled_dims: str = "nk") -> None:
    g, m, k = a.shape
    n = b.shape[1]
    if min(g, m, n, k) == 0:
        return
    defines = {"DG_MASKED": 1, "DG_D_FP32": int(d.dtype == torch.float32), **shape_defines(compiled_dims, n=n, k=k)}
    launch(a, b, d, masked_m, m, n, k, g, 1,
           {"lda": a.stride(1), "ldb": b.stride(1), "b_group": b.stride(0), "ldd": d.stride(1), "a_group": a.stride(0),
            "d_group": d.stride(0)}, defines, g * m_blocks(m) * n_blocks(n))
