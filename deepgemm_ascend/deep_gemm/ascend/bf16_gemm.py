"""Ascend BF16 GEMM: the hand-written cube kernels behind ``bf16_gemm_{nt,nn,tn,tt}``.

Entry point (for the dispatch table's Ascend column; arguments already validated by
``deep_gemm.gemm``, exactly the canonical arguments of ``deep_gemm.reference.bf16_gemm_nt``)::

    bf16_gemm_nt(a, b, d, c=None, alpha=None, compiled_dims="nk") -> None

- ``a`` ``[M, K]`` and ``b`` ``[N, K]`` BF16, each K-major (``stride(-1) == 1``) or MN-major
  (``stride(-2) == 1``): ``nn``/``tn``/``tt`` arrive here as transposed views and are loaded with
  DN->NZ instead of ND->NZ, never copied.
- ``d`` ``[M, N]`` BF16 or FP32, row-major, written in place: ``d = alpha * a @ b.T (+ c)`` with FP32
  accumulation, rounded once to ``d.dtype``.
- Without ``c`` and ``alpha`` the cube kernel (``bf16_gemm.asc``, 256 x 256 tiles where they fill the
  chip: ``_launch.cube_block_m``) stores through FixPipe; with either, the mixed kernel
  (``bf16_gemm_epilogue.asc``, 128 x 256 tiles) hands each tile to the vector cores.
- ``compiled_dims`` names the dimensions baked into the kernel as defines (the rest are run-time).
CPU tensors run on deepjit's Ascend twin, NPU tensors on the NPU.
"""
from __future__ import annotations

import torch

from ._launch import BLOCK_M, args, cube_block_m, kernel, m_blocks, n_blocks, num_cube_cores, shape_defines


def _operand(x: torch.Tensor) -> tuple[bool, int]:
    """(MN-major, stride of the non-unit dimension) of a validated ``[MN, K]`` operand."""
    if x.stride(-1) == 1:
        return False, x.stride(0)
    return True, x.stride(1)


def kernel_spec(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None,
                alpha: float | None = None, compiled_dims: str = "nk") -> tuple[str, str, dict]:
    """(entry name, package-relative source, defines) of the kernel serving these arguments."""
    m, k = a.shape
    defines = {"DG_A_MN_MAJOR": int(_operand(a)[0]), "DG_B_MN_MAJOR": int(_operand(b)[0]),
               "DG_D_FP32": int(d.dtype == torch.float32), **shape_defines(compiled_dims, m=m, n=b.shape[0], k=k)}
    if c is None and alpha is None:
        block_m = cube_block_m(m, b.shape[0], num_cube_cores(d))
        return "dg_bf16_gemm", "ascend/bf16_gemm.asc", {**defines, "DG_BLOCK_M": block_m}
    return "dg_bf16_gemm_epilogue", "ascend/bf16_gemm_epilogue.asc", {**defines, "DG_HAS_C": int(c is not None)}


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None,
                 alpha: float | None = None, compiled_dims: str = "nk") -> None:
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0 or k == 0:
        return
    lda, ldb = _operand(a)[1], _operand(b)[1]
    name, path, defines = kernel_spec(a, b, d, c, alpha, compiled_dims)
    grid = min(m_blocks(m, defines.get("DG_BLOCK_M", BLOCK_M)) * n_blocks(n), num_cube_cores(d))
    if c is None and alpha is None:
        kernel(name, path, defines)(grid, args("DgBf16GemmArgs", a=a, b=b, d=d, m=m, n=n, k=k, lda=lda, ldb=ldb,
                                                  ldd=d.stride(0)))
        return
    c_arg = d if c is None else c  # an unused pointer without c
    kernel(name, path, defines)(grid, args(
        "DgBf16GemmEpilogueArgs", a=a, b=b, d=d, c=c_arg, k_groups=d, num_groups=1, m=m, n=n, k=k, lda=lda, ldb=ldb,
        ldd=d.stride(0), ldc=c_arg.stride(0), d_group_stride=0, c_group_stride=0,
        alpha=1.0 if alpha is None else float(alpha), sfa=d, sfb=d, ld_sfa=0, ld_sfb=0))  # no K groups, no MX scales
