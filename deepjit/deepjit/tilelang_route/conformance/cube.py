"""Cube-core kernels: GM->L1 nd2nz / dn2nz, L1->L0A/L0B (+ transpose), mmad with FP32 accumulation in
L0C, L0C->GM (NZ->ND), block-scaled MX FP8 products. Every shape is non-square and the operands are
non-symmetric, so a swapped index, a wrong fractal order or a transposed operand changes the result;
the ragged case has M, N not multiples of 16.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations."""
import torch

from .case import Case
from .data import randint, randn, sentinel

# FP32 accumulation of exact BF16/FP16/FP8 products: only the summation order may differ from torch.
GEMM_TOL = dict(check="close", atol=1e-4, rtol=1e-5)


def gemm_l0_nn(m=48, n=32, k=64, dtype="float16"):
    """A[m, k] @ B[k, n] through explicit L0A/L0B tiles (B is not transposed: l12l0b transpose path)."""
    import tilelang.ascend.language as T

    @T.prim_func
    def gemm_l0_nn(A: T.Tensor((m, k), dtype), B: T.Tensor((k, n), dtype), C: T.Tensor((m, n), "float32")):
        with T.Kernel(1):
            a_l1 = T.alloc_l1((m, k), dtype)
            b_l1 = T.alloc_l1((k, n), dtype)
            a_l0 = T.alloc_l0a((m, k), dtype)
            b_l0 = T.alloc_l0b((k, n), dtype)
            c = T.alloc_l0c((m, n), "float32")
            T.copy(A, a_l1)
            T.copy(B, b_l1)
            T.copy(a_l1, a_l0)
            T.copy(b_l1, b_l0)
            T.gemm(a_l0, b_l0, c, clear_accum=True)
            T.copy(c, C)

    return gemm_l0_nn


def gemm_l0_nt(m=32, n=48, k=96, dtype="bfloat16"):
    """A[m, k] @ B[n, k]^T through explicit L0A/L0B tiles (plain l12l0b)."""
    import tilelang.ascend.language as T

    @T.prim_func
    def gemm_l0_nt(A: T.Tensor((m, k), dtype), B: T.Tensor((n, k), dtype), C: T.Tensor((m, n), "float32")):
        with T.Kernel(1):
            a_l1 = T.alloc_l1((m, k), dtype)
            b_l1 = T.alloc_l1((n, k), dtype)
            a_l0 = T.alloc_l0a((m, k), dtype)
            b_l0 = T.alloc_l0b((n, k), dtype)
            c = T.alloc_l0c((m, n), "float32")
            T.copy(A, a_l1)
            T.copy(B, b_l1)
            T.copy(a_l1, a_l0)
            T.copy(b_l1, b_l0)
            T.gemm(a_l0, b_l0, c, transpose_B=True, clear_accum=True)
            T.copy(c, C)

    return gemm_l0_nt


def gemm_nt_l1(m=32, n=48, k=64, dtype="bfloat16", name="gemm_nt_l1"):
    """TileLang's L1 GEMM template (ascend_gemm_l1): L1 operands, L0 staging inside the template."""
    import tilelang.ascend.language as T

    @T.prim_func
    def gemm_nt_l1(A: T.Tensor((m, k), dtype), B: T.Tensor((n, k), dtype), C: T.Tensor((m, n), "float32")):
        with T.Kernel(1):
            a_l1 = T.alloc_l1((m, k), dtype)
            b_l1 = T.alloc_l1((n, k), dtype)
            c = T.alloc_l0c((m, n), "float32")
            T.copy(A, a_l1)
            T.copy(B, b_l1)
            T.gemm(a_l1, b_l1, c, transpose_B=True, clear_accum=True)
            T.copy(c, C)

    gemm_nt_l1.__name__ = name
    return gemm_nt_l1


def gemm_dn2nz(m=48, n=32, k=64):
    """A arrives K-major ([k, m] in GM): dn2nz transposes it into the NZ layout of an [m, k] tile."""
    import tilelang.ascend.language as T

    @T.prim_func
    def gemm_dn2nz(A: T.Tensor((k, m), "bfloat16"), B: T.Tensor((n, k), "bfloat16"), C: T.Tensor((m, n), "float32")):
        with T.Kernel(1):
            a_l1 = T.alloc_l1((m, k), "bfloat16")
            b_l1 = T.alloc_l1((n, k), "bfloat16")
            c = T.alloc_l0c((m, n), "float32")
            T.copy(A, a_l1, transpose=True)
            T.copy(B, b_l1)
            T.gemm(a_l1, b_l1, c, transpose_B=True, clear_accum=True)
            T.copy(c, C)

    return gemm_dn2nz


def gemm_ragged(m=40, n=24, k=48):
    """M = 40, N = 24: nd2nz of partial fractals into 48 x 32 tiles and an L0C->GM of the 40 x 24 corner."""
    import tilelang.ascend.language as T

    @T.prim_func
    def gemm_ragged(A: T.Tensor((m, k), "bfloat16"), B: T.Tensor((n, k), "bfloat16"), C: T.Tensor((m, n), "float32")):
        with T.Kernel(1):
            a_l1 = T.alloc_l1((48, k), "bfloat16")
            b_l1 = T.alloc_l1((32, k), "bfloat16")
            c = T.alloc_l0c((48, 32), "float32")
            T.copy(A, a_l1[0:m, :])
            T.copy(B, b_l1[0:n, :])
            T.gemm(a_l1, b_l1, c, transpose_B=True, clear_accum=True)
            T.copy(c[0:m, 0:n], C)

    return gemm_ragged


def gemm_pipelined(m=64, n=96, k=128, bm=32, bn=48, bk=32):
    """2 x 2 blocks, each accumulating four K steps in L0C through a double-buffered T.Pipelined loop
    (MTE2 / MTE1 / M flags alternate between two L1 stages)."""
    import tilelang.ascend.language as T
    tiles_n = n // bn

    @T.prim_func
    def gemm_pipelined(A: T.Tensor((m, k), "float16"), B: T.Tensor((n, k), "float16"), C: T.Tensor((m, n), "float32")):
        with T.Kernel((m // bm) * tiles_n) as bx:
            a_l1 = T.alloc_l1((bm, bk), "float16")
            b_l1 = T.alloc_l1((bn, bk), "float16")
            c = T.alloc_l0c((bm, bn), "float32")
            row, col = bx // tiles_n * bm, bx % tiles_n * bn
            for kk in T.Pipelined(k // bk, num_stages=2):
                T.copy(A[row, kk * bk], a_l1)
                T.copy(B[col, kk * bk], b_l1)
                T.gemm(a_l1, b_l1, c, transpose_B=True, clear_accum=(kk == 0))
            T.copy(c, C[row:row + bm, col:col + bn])

    return gemm_pipelined


def gemm_mx(m=32, n=48, k=128, dtype="float8_e4m3fn"):
    """Block-scaled MX GEMM: C = sum_k A*2^(SA-127) * B*2^(SB-127), one E8M0 scale per 32 K elements
    (loaded as int16 pairs by dn2nz, moved by l12l0a/b_mx, consumed by mmad_mx). ``dtype`` E4M3 or
    E2M1 (FP4: two elements per byte, element 0 in the low nibble, C0 = 64 elements)."""
    import tilelang.ascend.language as T
    sk = k // 32

    @T.prim_func
    def gemm_mx(A: T.Tensor((m, k), dtype), B: T.Tensor((n, k), dtype),
                SA: T.Tensor((m, sk), "float8_e8m0fnu"), SB: T.Tensor((n, sk), "float8_e8m0fnu"),
                C: T.Tensor((m, n), "float32")):
        with T.Kernel(1):
            a = T.alloc_l1((m, k), dtype)
            b = T.alloc_l1((n, k), dtype)
            sa = T.alloc_l1((m, sk), "float8_e8m0fnu")
            sb = T.alloc_l1((n, sk), "float8_e8m0fnu")
            c = T.alloc_l0c((m, n), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.copy(SA, sa)
            T.copy(SB, sb)
            T.gemm_blockscaled(a, b, c, sa, sb, transpose_B=True, clear_accum=True)
            T.copy(c, C)

    gemm_mx.__name__ = "gemm_mx_fp4" if "float4" in dtype else "gemm_mx_fp8"
    return gemm_mx


def _mm(a, b):
    return (a.double() @ b.double()).float()


def _gemm_inputs(shape_a, shape_b, shape_c, dtype):
    return lambda g: [randn(g, shape_a, dtype), randn(g, shape_b, dtype), sentinel(shape_c, torch.float32)]


E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def e2m1_to_float(packed: torch.Tensor) -> torch.Tensor:
    """float4_e2m1fn_x2 [.., k/2] -> float32 [.., k]: element 2i in the low nibble, 2i+1 in the high one."""
    codes = packed.view(torch.uint8).long()
    return torch.stack([E2M1_VALUES[codes & 0xF], E2M1_VALUES[codes >> 4]], dim=-1).flatten(-2)


def _mx_scales(g, m, n, k):
    sa = randint(g, (m, k // 32), 120, 134, torch.uint8).view(torch.float8_e8m0fnu)
    sb = randint(g, (n, k // 32), 120, 134, torch.uint8).view(torch.float8_e8m0fnu)
    return [sa, sb]


def _mx_inputs(g, m=32, n=48, k=128):
    a = (torch.randn(m, k, generator=g) * 8).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, generator=g) * 8).to(torch.float8_e4m3fn)
    return [a, b, *_mx_scales(g, m, n, k), sentinel((m, n), torch.float32)]


def _mx_fp4_inputs(g, m=32, n=48, k=128):
    a = randint(g, (m, k // 2), 0, 256, torch.uint8).view(torch.float4_e2m1fn_x2)  # every nibble pattern
    b = randint(g, (n, k // 2), 0, 256, torch.uint8).view(torch.float4_e2m1fn_x2)
    return [a, b, *_mx_scales(g, m, n, k), sentinel((m, n), torch.float32)]


def _mx_product(a, b, sa, sb):
    scale_a = sa.float().repeat_interleave(32, dim=1)  # E8M0 decodes to 2^(e - 127)
    scale_b = sb.float().repeat_interleave(32, dim=1)
    return {4: _mm(a * scale_a, (b * scale_b).T)}


def _mx_reference(a, b, sa, sb, c):
    return _mx_product(a.float(), b.float(), sa, sb)


def _mx_fp4_reference(a, b, sa, sb, c):
    return _mx_product(e2m1_to_float(a), e2m1_to_float(b), sa, sb)


CASES = [
    Case("gemm_l0_nn_fp16", "cube", gemm_l0_nn, _gemm_inputs((48, 64), (64, 32), (48, 32), torch.float16),
         lambda a, b, c: {2: _mm(a, b)}, "nd2nz, l12l0a, l12l0b_transpose, mmad FP16, l0c2gm", **GEMM_TOL),
    Case("gemm_l0_nt_bf16", "cube", gemm_l0_nt, _gemm_inputs((32, 96), (48, 96), (32, 48), torch.bfloat16),
         lambda a, b, c: {2: _mm(a, b.T)}, "nd2nz, l12l0a, l12l0b, mmad BF16, l0c2gm", **GEMM_TOL),
    Case("gemm_nt_l1_bf16", "cube", gemm_nt_l1, _gemm_inputs((32, 64), (48, 64), (32, 48), torch.bfloat16),
         lambda a, b, c: {2: _mm(a, b.T)}, "ascend_gemm_l1 template, BF16, locks between MTE1 and M", **GEMM_TOL),
    Case("gemm_nt_l1_fp32", "cube", lambda: gemm_nt_l1(32, 48, 24, "float32", "gemm_nt_l1_fp32"),
         _gemm_inputs((32, 24), (48, 24), (32, 48), torch.float32),
         lambda a, b, c: {2: _mm(a, b.T)}, "ascend_gemm_l1 template, FP32 operands (C0 = 8)", **GEMM_TOL),
    Case("gemm_dn2nz_bf16", "cube", gemm_dn2nz, _gemm_inputs((64, 48), (32, 64), (48, 32), torch.bfloat16),
         lambda a, b, c: {2: _mm(a.T, b.T)}, "dn2nz (K-major A) + nd2nz, mmad BF16", **GEMM_TOL),
    Case("gemm_ragged_bf16", "cube", gemm_ragged, _gemm_inputs((40, 48), (24, 48), (40, 24), torch.bfloat16),
         lambda a, b, c: {2: _mm(a, b.T)}, "nd2nz of partial fractals, l0c2gm of a 40 x 24 corner", **GEMM_TOL),
    Case("gemm_pipelined_fp16", "cube", gemm_pipelined,
         _gemm_inputs((64, 128), (96, 128), (64, 96), torch.float16),
         lambda a, b, c: {2: _mm(a, b.T)}, "T.Pipelined double-buffered L1, 4 blocks, L0C accumulation", **GEMM_TOL),
    Case("gemm_mx_fp8", "cube", gemm_mx, _mx_inputs, _mx_reference,
         "block-scaled MXFP8 (E8M0 pairs): dn2nz scales, l12l0a/b_mx, mmad_mx", check="close", atol=1e-3, rtol=1e-5),
    Case("gemm_mx_fp4", "cube", lambda: gemm_mx(dtype="float4_e2m1fn"), _mx_fp4_inputs, _mx_fp4_reference,
         "block-scaled MXFP4 (E2M1 nibble pairs, C0 = 64): nd2nz of packed bytes, mmad_mx FP4", check="close",
         atol=1e-3, rtol=1e-5),
]
