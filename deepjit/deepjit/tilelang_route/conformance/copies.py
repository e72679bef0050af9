"""Global memory <-> Unified Buffer copies: contiguous, strided sub-blocks, rows whose byte length is
not a multiple of 32 (the UB row is padded, GM is not), runtime-ragged tails and pad fill.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations."""
import torch

from .case import Case
from .data import randint, randn, sentinel


def copy_ragged_1d(n=1000, tile=256):
    """Four blocks of ``tile`` elements; the last one copies the runtime remainder ``n - begin``."""
    import tilelang.ascend.language as T
    blocks = (n + tile - 1) // tile

    @T.prim_func
    def copy_ragged_1d(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(blocks) as bx:
            a = T.alloc_shared((tile,), "float32")
            begin = bx * tile
            extent = T.min(tile, n - begin)
            T.copy(A[begin:begin + extent], a[0:extent])
            T.copy(a[0:extent], B[begin:begin + extent])

    return copy_ragged_1d


def copy_strided_2d(rows=24, cols=100, r0=3, c0=8, br=16, bc=40):
    """A [br, bc] window of a wider [rows, cols] tensor (GM row stride != UB row stride)."""
    import tilelang.ascend.language as T

    @T.prim_func
    def copy_strided_2d(A: T.Tensor((rows, cols), "float16"), B: T.Tensor((br, bc), "float16")):
        with T.Kernel(1):
            a = T.alloc_shared((br, bc), "float16")
            T.copy(A[r0:r0 + br, c0:c0 + bc], a)
            T.copy(a, B)

    return copy_strided_2d


def copy_padded_rows(rows=6, cols=37, ub_cols=40, out_cols=45):
    """Rows of 37 floats (148 bytes) land in 40-float UB rows and leave into a 45-wide tensor."""
    import tilelang.ascend.language as T

    @T.prim_func
    def copy_padded_rows(A: T.Tensor((rows, cols), "float32"), B: T.Tensor((rows, out_cols), "float32")):
        with T.Kernel(1):
            a = T.alloc_shared((rows, ub_cols), "float32")
            T.copy(A, a[:, 0:cols])
            T.copy(a[:, 0:cols], B[:, 0:cols])

    return copy_padded_rows


def copy_int8_window(rows=7, cols=90, c0=5, width=45, ub_cols=64):
    """Byte rows of 45 int8 from column 5: unaligned source start and a 45-byte burst."""
    import tilelang.ascend.language as T

    @T.prim_func
    def copy_int8_window(A: T.Tensor((rows, cols), "int8"), B: T.Tensor((rows, width), "int8")):
        with T.Kernel(1):
            a = T.alloc_shared((rows, ub_cols), "int8")
            T.copy(A[:, c0:c0 + width], a[:, 0:width])
            T.copy(a[:, 0:width], B)

    return copy_int8_window


def copy_pad_value(rows=4, cols=13, pad=-2.0):
    """GM->UB with ``pad_value``: each 13-float row is rounded up to 16 and the 3 pad lanes filled."""
    import tilelang.ascend.language as T

    @T.prim_func
    def copy_pad_value(A: T.Tensor((rows, cols), "float32"), B: T.Tensor((rows, 16), "float32")):
        with T.Kernel(1):
            a = T.alloc_shared((rows, 16), "float32")
            T.copy(A, a[:, 0:cols], pad_value=pad)
            T.copy(a, B)

    return copy_pad_value


def _pad_expected(a, b):
    want = torch.full((4, 16), -2.0)
    want[:, :13] = a
    return {1: want}


def _window_f16(a, b):
    return {1: a[3:19, 8:48].clone()}


def _padded(a, b):
    want = b.clone()
    want[:, :37] = a
    return {1: want}


def scalar_gm_store_widths(n=64, blocks=4):
    """Scalar GM stores of 1-, 2- and 4-byte elements (TileLang lowers them to asc_store_dev through
    tl::write_gm_bypass_dcache), each block writing its slice from the top down, so a store wider than its
    element would overwrite neighbours already written."""
    import tilelang.ascend.language as T

    @T.prim_func
    def main(X: T.Tensor((blocks * n,), "float32"), O8: T.Tensor((blocks * n,), "int8"),
             O16: T.Tensor((blocks * n,), "bfloat16"), O32: T.Tensor((blocks * n,), "float32")):
        with T.Kernel(blocks) as bx:
            x_ub = T.alloc_shared((n,), "float32")
            T.copy(X[bx * n:(bx + 1) * n], x_ub)
            for k in T.serial(n):
                O8[bx * n + n - 1 - k] = T.Cast("int8", x_ub[n - 1 - k])
                O16[bx * n + n - 1 - k] = T.Cast("bfloat16", x_ub[n - 1 - k])
                O32[bx * n + n - 1 - k] = x_ub[n - 1 - k] * 2.0

    return main


CASES = [
    Case("copy_ragged_1d", "vector", copy_ragged_1d,
         lambda g: [randn(g, (1000,)), sentinel((1000,), torch.float32)], lambda a, b: {1: a.clone()},
         "GM<->UB contiguous, runtime ragged tail"),
    Case("copy_strided_2d", "vector", copy_strided_2d,
         lambda g: [randn(g, (24, 100), torch.float16), sentinel((16, 40), torch.float16)], _window_f16,
         "GM->UB strided window, UB->GM contiguous"),
    Case("copy_padded_rows", "vector", copy_padded_rows,
         lambda g: [randn(g, (6, 37)), sentinel((6, 45), torch.float32)], _padded,
         "GM<->UB rows not a multiple of 32 bytes, different GM strides; columns past 37 untouched"),
    Case("copy_int8_window", "vector", copy_int8_window,
         lambda g: [randint(g, (7, 90), -128, 128, torch.int8), sentinel((7, 45), torch.int8)],
         lambda a, b: {1: a[:, 5:50].clone()}, "GM<->UB byte rows, unaligned start"),
    Case("copy_pad_value", "vector", copy_pad_value,
         lambda g: [randn(g, (4, 13)), sentinel((4, 16), torch.float32)], _pad_expected,
         "GM->UB pad_value fills the 32-byte row padding"),
    Case("scalar_gm_store_widths", "vector", scalar_gm_store_widths,
         # small integers: exact in int8 and bfloat16, so the casts' rounding plays no part
         lambda g: [randint(g, (256,), -100, 100).float(), sentinel((256,), torch.int8),
                    sentinel((256,), torch.bfloat16), sentinel((256,), torch.float32)],
         lambda x, a, b, c: {1: x.to(torch.int8), 2: x.to(torch.bfloat16), 3: x * 2},
         "scalar GM stores of int8 / bf16 / f32 (asc_store_dev, DCache bypass): each writes its own bytes only"),
]
