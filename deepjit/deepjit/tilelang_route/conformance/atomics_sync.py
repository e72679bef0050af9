"""Store-mode and SIMT atomics, HF32 cube operands, cross-block sync and byte views. Each case has
inputs where a wrong semantics changes the result: blocks contend for the same GM elements (an
overwrite instead of an accumulate keeps one block's part), HF32 products differ from FP32 ones and
the two HF32 round modes differ on exact ties, a block reads a total the other blocks finish only
after the inter-block sync, a byte view reinterprets bits that an element cast would change.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations."""
import torch

from .case import Case
from .data import randint, randn, sentinel

GEMM_TOL = dict(check="close", atol=1e-4, rtol=1e-5)


def splitk_atomic_gemm(m=32, n=48, k=256, splits=8, dtype="float16"):
    """C += A @ B^T with K split over `splits` blocks: each block's L0C partial is stored to C under
    T.set_atomic("add") (FixPipe L0C -> GM store-mode atomic), so the blocks contend for every element."""
    import tilelang.ascend.language as T
    ks = k // splits

    @T.prim_func
    def splitk_atomic_gemm(A: T.Tensor((m, k), dtype), B: T.Tensor((n, k), dtype), C: T.Tensor((m, n), "float32")):
        with T.Kernel(splits) as bx:
            a_l1 = T.alloc_l1((m, ks), dtype)
            b_l1 = T.alloc_l1((n, ks), dtype)
            c = T.alloc_l0c((m, n), "float32")
            T.copy(A[0:m, bx * ks:(bx + 1) * ks], a_l1)
            T.copy(B[0:n, bx * ks:(bx + 1) * ks], b_l1)
            T.gemm(a_l1, b_l1, c, transpose_B=True, clear_accum=True)
            T.set_atomic("add", "float32")
            T.copy(c, C)
            T.set_atomic_none()

    return splitk_atomic_gemm


def hf32_gemm(mode, m=32, n=48, k=24):
    """C = A @ B^T of FP32 operands under T.set_hf32_mode(mode) (None: FP32 operands)."""
    import tilelang.ascend.language as T
    name = f"hf32_gemm_{mode or 'off'}"

    @T.prim_func
    def hf32_gemm(A: T.Tensor((m, k), "float32"), B: T.Tensor((n, k), "float32"), C: T.Tensor((m, n), "float32")):
        with T.Kernel(1):
            a_l1 = T.alloc_l1((m, k), "float32")
            b_l1 = T.alloc_l1((n, k), "float32")
            c = T.alloc_l0c((m, n), "float32")
            T.copy(A, a_l1)
            T.copy(B, b_l1)
            T.set_hf32_mode(mode)
            T.gemm(a_l1, b_l1, c, transpose_B=True, clear_accum=True)
            T.set_hf32_mode(None)
            T.copy(c, C)

    hf32_gemm.__name__ = name
    return hf32_gemm.with_attr("global_symbol", name)


def simt_atomic_bins(blocks=16, threads=128, bins=8):
    """Out[t % bins] += X[b, t] through T.atomic_add on GM from every lane of every block."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simt_atomic_bins(X: T.Tensor((blocks, threads), "int32"), Out: T.Tensor((bins,), "int32")):
        with T.Kernel(blocks) as bx:
            x = T.alloc_shared((threads,), "int32")
            T.copy(X[bx, 0:threads], x)
            with T.SimtVF(threads=threads):
                for t in T.Parallel(threads):
                    T.atomic_add(Out[t % bins], x[t])

    return simt_atomic_bins


def synced_total(blocks=8, n=64):
    """Every block adds its row into Total (UB -> GM store-mode atomic), then, after an all-core
    asc_sync_inter_arrive / wait, copies Total back into its row of Out: each row must hold the sum of
    all blocks' rows, which only the sync guarantees."""
    import tilelang.ascend.language as T

    @T.prim_func
    def synced_total(X: T.Tensor((blocks, n), "float32"), Total: T.Tensor((n,), "float32"),
                     Out: T.Tensor((blocks, n), "float32")):
        with T.Kernel(blocks) as bx:
            x = T.alloc_shared((n,), "float32")
            t = T.alloc_shared((n,), "float32")
            T.copy(X[bx, 0:n], x)
            T.set_atomic("add", "float32")
            T.copy(x, Total)
            T.set_atomic_none()
            T.ascend_sync_inter_arrive("PIPE_MTE3", 0)
            T.ascend_sync_inter_wait("PIPE_MTE2", 0)
            T.copy(Total, t)
            T.copy(t, Out[bx, 0:n])

    return synced_total


def byte_view(rows=8, cols=16):
    """X holds float32 bits as bytes; T.view reads them as int32 and the kernel flips each sign bit."""
    import tilelang.ascend.language as T

    @T.prim_func
    def byte_view(X: T.Tensor((rows, cols * 4), "uint8"), Y: T.Tensor((rows, cols), "int32")):
        with T.Kernel(1):
            xi = T.view(X, (rows, cols), "int32")
            u = T.alloc_shared((rows, cols), "int32")
            T.copy(xi, u)
            with T.SimtVF(threads=128):
                for i, j in T.Parallel(rows, cols):
                    u[i, j] = u[i, j] ^ -2147483648
            T.copy(u, Y)

    return byte_view


def round_hf32(x: torch.Tensor, ties_away: bool) -> torch.Tensor:
    """FP32 -> HF32 (10 mantissa bits on Ascend 950), ties to even or away from zero (asc-devkit
    HF32.md, asc_set_hf32_round_mode.md); finite values only."""
    bits = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    half = 1 << 12
    bits = bits + (half if ties_away else half - 1 + ((bits >> 13) & 1))
    bits = bits & ~((1 << 13) - 1) & 0xFFFFFFFF
    return torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32).view(torch.float32)


def _hf32_inputs(gen):
    """FP32 operands whose dropped 13 mantissa bits are random, or exactly a tie (0x1000) for a third of
    them, so FP32, HF32-even and HF32-away products all differ."""
    def operand(shape):
        x = randn(gen, shape)
        bits = x.view(torch.int32)
        tie = torch.rand(shape, generator=gen) < 1 / 3
        return torch.where(tie, (bits & ~0x1FFF) | 0x1000, bits).view(torch.float32)
    return [operand((32, 24)), operand((48, 24)), sentinel((32, 48), torch.float32)]


def _hf32_reference(mode):
    def ref(a, b, c):
        if mode is not None:
            a, b = round_hf32(a, mode == "nearest_zero"), round_hf32(b, mode == "nearest_zero")
        return {2: (a.double() @ b.double().T).float()}
    return ref


CASES = [
    Case("splitk_atomic_gemm", "cube", splitk_atomic_gemm,
         lambda g: [randn(g, (32, 256), torch.float16), randn(g, (48, 256), torch.float16), randn(g, (32, 48))],
         lambda a, b, c: {2: c + (a.double() @ b.double().T).float()},
         "split-K over 8 blocks: T.set_atomic('add') L0C -> GM store-mode atomic", **GEMM_TOL),
    Case("hf32_gemm_off", "cube", lambda: hf32_gemm(None), _hf32_inputs, _hf32_reference(None),
         "T.set_hf32_mode(None): FP32 operands", **GEMM_TOL),
    Case("hf32_gemm_even", "cube", lambda: hf32_gemm("nearest_even"), _hf32_inputs, _hf32_reference("nearest_even"),
         "T.set_hf32_mode('nearest_even'): operands rounded to HF32, ties to even", **GEMM_TOL),
    Case("hf32_gemm_away", "cube", lambda: hf32_gemm("nearest_zero"), _hf32_inputs, _hf32_reference("nearest_zero"),
         "T.set_hf32_mode('nearest_zero') = asc_hf32_round_mode::NEAREST_AWAY: ties away from zero", **GEMM_TOL),
    Case("simt_atomic_bins", "vector", simt_atomic_bins,
         lambda g: [randint(g, (16, 128), -1000, 1000), randint(g, (8,), -5, 5)],
         lambda x, out: {1: out + x.view(16, 16, 8).sum((0, 1), dtype=torch.int32)},
         "T.atomic_add on GM (asc_atomic_add) from 16 blocks x 128 lanes into 8 elements"),
    Case("synced_total", "vector", synced_total,
         lambda g: [randint(g, (8, 64), -64, 64).float(), randint(g, (64,), -8, 8).float(),
                    sentinel((8, 64), torch.float32)],
         lambda x, total, out: {1: total + x.sum(0), 2: (total + x.sum(0)).expand(8, 64).clone()},
         "UB -> GM store-mode atomic from 8 blocks, then asc_sync_inter_arrive / wait before reading the total"),
    Case("byte_view", "vector", byte_view,
         lambda g: [randn(g, (8, 16)).view(torch.uint8), sentinel((8, 16), torch.int32)],
         lambda x, y: {1: x.view(torch.int32) ^ torch.tensor(-2147483648, dtype=torch.int32)},
         "T.view of a uint8 tensor as int32 (the kernel parameter is named after the view)"),
]
