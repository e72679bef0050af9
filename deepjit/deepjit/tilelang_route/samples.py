"""DeepJIT's own TileLang Ascend sample kernels: one of each core type, so ``make ascend-codegen``
exercises the vector, cube and mixed paths even before the libraries register theirs.

No ``from __future__ import annotations`` here: TileLang evaluates the ``T.Tensor`` annotations,
which must see the shape variables of the enclosing function."""

from .lowering import AscendKernelSpec


def vector_add(n: int = 16384, tile: int = 1024, num_blocks: int = 8, threads: int = 256):
    """C = A + B in float32: tiles staged through the Unified Buffer, added by a SIMT region."""
    import tilelang.ascend.language as T

    if n % (tile * num_blocks):
        raise ValueError(f"n: expected a multiple of tile * num_blocks = {tile * num_blocks}, got {n}")

    @T.prim_func
    def vector_add(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(num_blocks) as bx:
            a = T.alloc_shared((tile,), "float32")
            b = T.alloc_shared((tile,), "float32")
            c = T.alloc_shared((tile,), "float32")
            for step in T.Pipelined(n // (tile * num_blocks), num_stages=2):
                begin = (step * num_blocks + bx) * tile
                T.copy(A[begin:begin + tile], a)
                T.copy(B[begin:begin + tile], b)
                with T.SimtVF(threads=threads):
                    for i in T.Parallel(tile):
                        c[i] = a[i] + b[i]
                T.copy(c, C[begin:begin + tile])

    return vector_add


def _check_tiles(m, n, k, block_m, block_n, block_k):
    if m % block_m or n % block_n or k % block_k:
        raise ValueError(f"m, n, k: expected multiples of the tile {block_m}x{block_n}x{block_k}, got {m}x{n}x{k}")


def gemm_nt(m: int = 256, n: int = 256, k: int = 256, block_m: int = 128, block_n: int = 128, block_k: int = 64):
    """C[m, n] = A[m, k] @ B[n, k]^T, BF16 in, FP32 out, on the cube cores only (L1 -> L0C -> GM)."""
    import tilelang.ascend.language as T

    _check_tiles(m, n, k, block_m, block_n, block_k)
    tiles_n = n // block_n

    @T.prim_func
    def gemm_nt(A: T.Tensor((m, k), "bfloat16"), B: T.Tensor((n, k), "bfloat16"), C: T.Tensor((m, n), "float32")):
        with T.Kernel((m // block_m) * tiles_n) as bx:
            a_l1 = T.alloc_l1((block_m, block_k), "bfloat16")
            b_l1 = T.alloc_l1((block_n, block_k), "bfloat16")
            c_l0c = T.alloc_l0c((block_m, block_n), "float32")
            row, col = bx // tiles_n * block_m, bx % tiles_n * block_n
            for kk in T.Pipelined(k // block_k, num_stages=2):
                T.copy(A[row, kk * block_k], a_l1)
                T.copy(B[col, kk * block_k], b_l1)
                T.gemm(a_l1, b_l1, c_l0c, transpose_B=True, clear_accum=(kk == 0))
            T.copy(c_l0c, C[row:row + block_m, col:col + block_n])

    return gemm_nt


def gemm_nt_relu(m: int = 256, n: int = 256, k: int = 256, block_m: int = 128, block_n: int = 128, block_k: int = 64):
    """relu(A @ B^T): the cube cores multiply, the vector cores apply the epilogue (a mixed kernel)."""
    import tilelang.ascend.language as T

    _check_tiles(m, n, k, block_m, block_n, block_k)
    tiles_n = n // block_n

    @T.prim_func
    def gemm_nt_relu(A: T.Tensor((m, k), "bfloat16"), B: T.Tensor((n, k), "bfloat16"),
                            C: T.Tensor((m, n), "float32")):
        with T.Kernel((m // block_m) * tiles_n) as bx:
            a_l1 = T.alloc_l1((block_m, block_k), "bfloat16")
            b_l1 = T.alloc_l1((block_n, block_k), "bfloat16")
            c_l0c = T.alloc_l0c((block_m, block_n), "float32")
            c_ub = T.alloc_shared((block_m // 2, block_n), "float32")  # each of the 2 vector cores takes half
            row, col = bx // tiles_n * block_m, bx % tiles_n * block_n
            for kk in T.Pipelined(k // block_k, num_stages=2):
                T.copy(A[row, kk * block_k], a_l1)
                T.copy(B[col, kk * block_k], b_l1)
                T.gemm(a_l1, b_l1, c_l0c, transpose_B=True, clear_accum=(kk == 0))
            T.dual_copy(c_l0c, c_ub)
            with T.SimtVF(threads=128):
                for i, j in T.Parallel(block_m // 2, block_n):
                    c_ub[i, j] = T.max(c_ub[i, j], 0)
            T.dual_copy(c_ub, C[row:row + block_m, col:col + block_n])

    return gemm_nt_relu


def kernels() -> list[AscendKernelSpec]:
    return [AscendKernelSpec("vector_add", vector_add, "vector"),
            AscendKernelSpec("gemm_nt", gemm_nt, "cube"),
            AscendKernelSpec("gemm_nt_relu", gemm_nt_relu, "mix")]
