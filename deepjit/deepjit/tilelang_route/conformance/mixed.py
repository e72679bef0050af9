"""Mixed kernels: the cube core multiplies, the two vector cores run the epilogue on their half of the
tile (L0C->UB dual-destination copy, cross-core flags between AIC and both AIVs).

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations."""
import torch

from .case import Case
from .cube import GEMM_TOL, _mm
from .data import randn, sentinel


def gemm_relu_msplit(m=64, n=48, k=96, bk=32):
    """relu(A @ B^T): dual_copy splits M between the two AIVs; a SIMT region applies the ReLU."""
    import tilelang.ascend.language as T

    @T.prim_func
    def gemm_relu_msplit(A: T.Tensor((m, k), "bfloat16"), B: T.Tensor((n, k), "bfloat16"),
                         C: T.Tensor((m, n), "float32")):
        with T.Kernel(1):
            a_l1 = T.alloc_l1((m, bk), "bfloat16")
            b_l1 = T.alloc_l1((n, bk), "bfloat16")
            c_l0c = T.alloc_l0c((m, n), "float32")
            c_ub = T.alloc_shared((m // 2, n), "float32")
            for kk in T.Pipelined(k // bk, num_stages=2):
                T.copy(A[0, kk * bk], a_l1)
                T.copy(B[0, kk * bk], b_l1)
                T.gemm(a_l1, b_l1, c_l0c, transpose_B=True, clear_accum=(kk == 0))
            T.dual_copy(c_l0c, c_ub)
            with T.SimtVF(threads=64):
                for i, j in T.Parallel(m // 2, n):
                    c_ub[i, j] = T.max(c_ub[i, j], 0)
            T.dual_copy(c_ub, C)

    return gemm_relu_msplit


def gemm_bias_nsplit(m=32, n=64, k=64):
    """A @ B^T * 0.5 + bias[n]: dual_copy splits N (each AIV takes 32 columns); a 1-D GM->UB dual_copy
    hands each AIV the bias slice of its half (indexed by sub-block id)."""
    import tilelang.ascend.language as T
    half = n // 2

    @T.prim_func
    def gemm_bias_nsplit(A: T.Tensor((m, k), "float16"), B: T.Tensor((n, k), "float16"),
                         Bias: T.Tensor((n,), "float32"), C: T.Tensor((m, n), "float32")):
        with T.Kernel(1):
            a_l1 = T.alloc_l1((m, k), "float16")
            b_l1 = T.alloc_l1((n, k), "float16")
            c_l0c = T.alloc_l0c((m, n), "float32")
            c_ub = T.alloc_shared((m, half), "float32")
            bias_ub = T.alloc_shared((half,), "float32")
            T.copy(A, a_l1)
            T.copy(B, b_l1)
            T.gemm(a_l1, b_l1, c_l0c, transpose_B=True, clear_accum=True)
            T.dual_copy(c_l0c, c_ub)
            T.dual_copy(Bias, bias_ub)
            with T.SimtVF(threads=64):
                for i, j in T.Parallel(m, half):
                    c_ub[i, j] = c_ub[i, j] * 0.5 + bias_ub[j]
            T.dual_copy(c_ub, C)

    return gemm_bias_nsplit


def gemm_cast_bf16(m=32, n=32, k=64):
    """An FP32 product leaves as BF16: L0C->UB (dual), a SIMT cast (round to nearest even), UB->GM."""
    import tilelang.ascend.language as T

    @T.prim_func
    def gemm_cast_bf16(A: T.Tensor((m, k), "bfloat16"), B: T.Tensor((n, k), "bfloat16"),
                       C: T.Tensor((m, n), "bfloat16")):
        with T.Kernel(1):
            a_l1 = T.alloc_l1((m, k), "bfloat16")
            b_l1 = T.alloc_l1((n, k), "bfloat16")
            c_l0c = T.alloc_l0c((m, n), "float32")
            c_ub = T.alloc_shared((m // 2, n), "float32")
            o_ub = T.alloc_shared((m // 2, n), "bfloat16")
            T.copy(A, a_l1)
            T.copy(B, b_l1)
            T.gemm(a_l1, b_l1, c_l0c, transpose_B=True, clear_accum=True)
            T.dual_copy(c_l0c, c_ub)
            with T.SimtVF(threads=64):
                for i, j in T.Parallel(m // 2, n):
                    o_ub[i, j] = T.Cast("bfloat16", c_ub[i, j])
            T.dual_copy(o_ub, C)

    return gemm_cast_bf16


def _cast_reference(a, b, c):
    return {2: _mm(a, b.T).to(torch.bfloat16)}


CASES = [
    Case("gemm_relu_msplit", "mix", gemm_relu_msplit,
         lambda g: [randn(g, (64, 96), torch.bfloat16), randn(g, (48, 96), torch.bfloat16),
                    sentinel((64, 48), torch.float32)],
         lambda a, b, c: {2: torch.relu(_mm(a, b.T))}, "l0c2ub dual destination (M split), SIMT epilogue",
         **GEMM_TOL),
    Case("gemm_bias_nsplit", "mix", gemm_bias_nsplit,
         lambda g: [randn(g, (32, 64), torch.float16), randn(g, (64, 64), torch.float16), randn(g, (64,)),
                    sentinel((32, 64), torch.float32)],
         lambda a, b, bias, c: {3: _mm(a, b.T) * 0.5 + bias}, "l0c2ub dual destination (N split), sub-block id",
         **GEMM_TOL),
    # Rounding to BF16 can flip by one ulp where the FP32 sums differ in their last bit.
    Case("gemm_cast_bf16", "mix", gemm_cast_bf16,
         lambda g: [randn(g, (32, 64), torch.bfloat16), randn(g, (32, 64), torch.bfloat16),
                    sentinel((32, 32), torch.bfloat16)],
         _cast_reference, "mixed kernel with a BF16 cast epilogue", check="close", atol=1e-2, rtol=8e-3),
]
