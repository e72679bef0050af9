"""What every Ascend kernel family shares: the handle on deepjit (``LIB.ascend_kernel``), the kernels'
argument structs (``args``: ``ascend/kernel_args.h`` filled by name), whether the tensors run on the
twin (CPU) or the NPU, the cube-core count that sizes persistent grids, and the compile-time
dimensions ``compiled_dims`` asks for."""
from __future__ import annotations

from collections.abc import Mapping

import torch

from deepjit import descriptors, kernel_args

from .._lib import LIB

# Output tile of cube_gemm.h (DG_BLOCK_M x DG_BLOCK_N defaults): sizes the persistent grids.
BLOCK_M, BLOCK_N = 128, 256
# The cube-only kernels' wide tile (256 x 256): half the GM (L2) bytes per FLOP of 128 x 256.
WIDE_BLOCK_M = 256


def kernel(name: str, relative_path: str, defines: Mapping[str, object]):
    """The package's Ascend kernel ``name`` from ``deep_gemm/<relative_path>`` with ``defines``
    (memoised by deepjit; compiled by the twin for CPU tensors, by bisheng for NPU tensors)."""
    return LIB.ascend_kernel(name, relative_path, defines)


def args(struct: str, **fields) -> kernel_args.KernelArgs:
    """The one launch argument of a kernel taking ``__gm__ const <struct>*``: every field of
    ``ascend/kernel_args.h``'s ``struct`` set by name (tensors for pointer fields)."""
    return kernel_args.pack(descriptors.struct_type(LIB.source("ascend/kernel_args.h"), struct), **fields)


def on_twin(t: torch.Tensor) -> bool:
    return t.device.type != "npu"


def num_cube_cores(t: torch.Tensor) -> int:
    return LIB.num_cube_cores(t.device)


def n_blocks(n: int) -> int:
    return -(-n // BLOCK_N)


def m_blocks(m: int, block_m: int = BLOCK_M) -> int:
    return -(-m // block_m)


def cube_block_m(m: int, n: int, cores: int) -> int:
    """BLOCK_M of the GEMMs that hold no D tile in UB (bf16_gemm.asc, fp8_mx_gemm.asc, the m_grouped kernels,
    and the fused FP8 x FP4 ones, whose vector cores only widen the FP4 operand into L1; ``m``: all rows, a
    bound where groups decide): the wide tile where it still gives every cube core a tile, else 128. The
    wide FP32 tile fills L0C, so its FixPipe no longer overlaps the next tile's K loop (a few % of the
    tile's cube time at K = 4096). The epilogue kernels keep 128: their UB holds two 128 x 256 tiles."""
    return WIDE_BLOCK_M if m_blocks(m, WIDE_BLOCK_M) * n_blocks(n) >= cores else BLOCK_M


def shape_defines(compiled_dims: str, **dims: int) -> dict[str, int]:
    """``DG_SHAPE_<X>`` for each dimension named in ``compiled_dims`` (0 = read at run time)."""
    return {f"DG_SHAPE_{name.upper()}": int(value) if name in compiled_dims else 0 for name, value in dims.items()}
