"""SIMT kernels beyond casts: elementwise arithmetic with a ragged tail, compare/select, integer ops
(wrapping multiply, arithmetic shifts, bit logic), a SIMT row reduction through warp shuffles, RMSNorm,
a top-k gate and a small online-softmax attention, each thread owning whole rows.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations."""
import torch

from .case import Case
from .data import randint, randn, sentinel


def simt_fma_ragged(n=1000, tile=256):
    """c = a * b + 1.5 over four blocks; the last block's lanes past n are masked off."""
    import tilelang.ascend.language as T
    blocks = (n + tile - 1) // tile

    @T.prim_func
    def simt_fma_ragged(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(blocks) as bx:
            a = T.alloc_shared((tile,), "float32")
            b = T.alloc_shared((tile,), "float32")
            c = T.alloc_shared((tile,), "float32")
            begin = bx * tile
            extent = T.min(tile, n - begin)
            T.copy(A[begin:begin + extent], a[0:extent])
            T.copy(B[begin:begin + extent], b[0:extent])
            with T.SimtVF(threads=128):
                for i in T.Parallel(tile):
                    c[i] = a[i] * b[i] + 1.5
            T.copy(c[0:extent], C[begin:begin + extent])

    return simt_fma_ragged


def simt_select(n=512):
    """out = a > b ? a : 2b and flag = a >= 0 (uint8)."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simt_select(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), Out: T.Tensor((n,), "float32"),
                    F: T.Tensor((n,), "uint8")):
        with T.Kernel(1):
            a = T.alloc_shared((n,), "float32")
            b = T.alloc_shared((n,), "float32")
            o = T.alloc_shared((n,), "float32")
            f = T.alloc_shared((n,), "uint8")
            T.copy(A, a)
            T.copy(B, b)
            with T.SimtVF(threads=128):
                for i in T.Parallel(n):
                    o[i] = T.if_then_else(a[i] > b[i], a[i], b[i] * 2.0)
                    f[i] = T.if_then_else(a[i] >= 0, T.uint8(1), T.uint8(0))
            T.copy(o, Out)
            T.copy(f, F)

    return simt_select


def simt_int_ops(n=512):
    """int32: x = (a + b) ^ (a >> 3), y = a * b (wraps), z = (min(a, b) & 0x0FF0) | (b << 2)."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simt_int_ops(A: T.Tensor((n,), "int32"), B: T.Tensor((n,), "int32"), X: T.Tensor((n,), "int32"),
                     Y: T.Tensor((n,), "int32"), Z: T.Tensor((n,), "int32")):
        with T.Kernel(1):
            a = T.alloc_shared((n,), "int32")
            b = T.alloc_shared((n,), "int32")
            x = T.alloc_shared((n,), "int32")
            y = T.alloc_shared((n,), "int32")
            z = T.alloc_shared((n,), "int32")
            T.copy(A, a)
            T.copy(B, b)
            with T.SimtVF(threads=128):
                for i in T.Parallel(n):
                    x[i] = (a[i] + b[i]) ^ (a[i] >> 3)
                    y[i] = a[i] * b[i]
                    z[i] = (T.min(a[i], b[i]) & 0x0FF0) | (b[i] << 2)
            T.copy(x, X)
            T.copy(y, Y)
            T.copy(z, Z)

    return simt_int_ops


def simt_row_absmax(m=8, n=64):
    """Row absmax in a SIMT region: per-thread partial maxima combined by warp all-reduce."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simt_row_absmax(A: T.Tensor((m, n), "float32"), M: T.Tensor((m,), "float32")):
        with T.Kernel(1):
            a = T.alloc_shared((m, n), "float32")
            mx = T.alloc_shared((m,), "float32")
            T.copy(A, a)
            with T.SimtVF(threads=64):
                T.reduce_absmax(a, mx, dim=1)
            T.copy(mx, M)

    return simt_row_absmax


def simt_rmsnorm(rows=32, d=96, eps=1e-6):
    """y = bf16(x * rsqrt(mean(x^2) + eps) * w), one thread per row, FP32 arithmetic."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simt_rmsnorm(X: T.Tensor((rows, d), "bfloat16"), W: T.Tensor((d,), "float32"),
                     Y: T.Tensor((rows, d), "bfloat16")):
        with T.Kernel(1):
            x = T.alloc_shared((rows, d), "bfloat16")
            w = T.alloc_shared((d,), "float32")
            y = T.alloc_shared((rows, d), "bfloat16")
            T.copy(X, x)
            T.copy(W, w)
            with T.SimtVF(threads=rows):
                for r in T.Parallel(rows):
                    ss = T.alloc_var("float32")
                    ss = 0.0
                    for j in T.serial(d):
                        ss = ss + T.Cast("float32", x[r, j]) * T.Cast("float32", x[r, j])
                    inv = T.rsqrt(ss / d + eps)
                    for j in T.serial(d):
                        y[r, j] = T.Cast("bfloat16", T.Cast("float32", x[r, j]) * inv * w[j])
            T.copy(y, Y)

    return simt_rmsnorm


def simt_topk_gate(tokens=32, experts=16, k=2):
    """Softmax over experts, the top-2 experts per token (first index wins ties) and their weights
    renormalised to sum to 1; one thread per token."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simt_topk_gate(S: T.Tensor((tokens, experts), "float32"), Idx: T.Tensor((tokens, k), "int32"),
                       Wt: T.Tensor((tokens, k), "float32")):
        with T.Kernel(1):
            s = T.alloc_shared((tokens, experts), "float32")
            idx = T.alloc_shared((tokens, k), "int32")
            wt = T.alloc_shared((tokens, k), "float32")
            T.copy(S, s)
            with T.SimtVF(threads=tokens):
                for t in T.Parallel(tokens):
                    best0 = T.alloc_var("int32")
                    best1 = T.alloc_var("int32")
                    best0 = 0
                    best1 = -1
                    for e in T.serial(1, experts):
                        if s[t, e] > s[t, best0]:
                            best1 = best0
                            best0 = e
                        elif best1 < 0 or s[t, e] > s[t, best1]:
                            best1 = e
                    # softmax weights of the two winners, renormalised: the denominator cancels
                    e1 = T.exp(s[t, best1] - s[t, best0])
                    idx[t, 0] = best0
                    idx[t, 1] = best1
                    wt[t, 0] = 1.0 / (1.0 + e1)
                    wt[t, 1] = e1 / (1.0 + e1)
            T.copy(idx, Idx)
            T.copy(wt, Wt)

    return simt_topk_gate


def simt_online_softmax_attention(q_len=32, kv_len=48, d=16):
    """O = softmax(Q K^T / sqrt(d)) V with the flash-attention recurrence (running max and sum,
    rescaled accumulator), one thread per query row."""
    import tilelang.ascend.language as T
    scale = 1.0 / (d ** 0.5)

    @T.prim_func
    def simt_online_softmax_attention(Q: T.Tensor((q_len, d), "float32"), K: T.Tensor((kv_len, d), "float32"),
                                      V: T.Tensor((kv_len, d), "float32"), Out: T.Tensor((q_len, d), "float32")):
        with T.Kernel(1):
            q = T.alloc_shared((q_len, d), "float32")
            kk = T.alloc_shared((kv_len, d), "float32")
            v = T.alloc_shared((kv_len, d), "float32")
            o = T.alloc_shared((q_len, d), "float32")
            T.copy(Q, q)
            T.copy(K, kk)
            T.copy(V, v)
            with T.SimtVF(threads=q_len):
                for i in T.Parallel(q_len):
                    m = T.alloc_var("float32")
                    lsum = T.alloc_var("float32")
                    m = -T.infinity("float32")
                    lsum = 0.0
                    for c in T.serial(d):
                        o[i, c] = 0.0
                    for j in T.serial(kv_len):
                        sc = T.alloc_var("float32")
                        sc = 0.0
                        for c in T.serial(d):
                            sc = sc + q[i, c] * kk[j, c]
                        sc = sc * scale
                        m_new = T.max(m, sc)
                        alpha = T.exp(m - m_new)
                        p = T.exp(sc - m_new)
                        lsum = lsum * alpha + p
                        for c in T.serial(d):
                            o[i, c] = o[i, c] * alpha + p * v[j, c]
                        m = m_new
                    for c in T.serial(d):
                        o[i, c] = o[i, c] / lsum
            T.copy(o, Out)

    return simt_online_softmax_attention


def _int_reference(a, b, x, y, z):
    return {2: (a + b) ^ (a >> 3), 3: a * b, 4: (torch.minimum(a, b) & 0x0FF0) | (b << 2)}


def _rmsnorm_reference(x, w, y):
    xf = x.double()
    return {2: (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()).to(torch.bfloat16)}


def _topk_reference(s, i, w):
    vals, idx = torch.topk(s.double(), 2, dim=-1)
    p = torch.softmax(vals, dim=-1)
    return {1: idx.to(torch.int32), 2: p.float()}


def _attention_reference(q, k, v, o):
    p = torch.softmax((q.double() @ k.double().T) / 4.0, dim=-1)
    return {3: (p @ v.double()).float()}


CASES = [
    Case("simt_fma_ragged", "vector", simt_fma_ragged,
         lambda g: [randn(g, (1000,)), randn(g, (1000,)), sentinel((1000,), torch.float32)],
         lambda a, b, c: {2: torch.addcmul(torch.full_like(a, 1.5), a, b)},
         "SIMT elementwise multiply-add (single rounding tolerated), ragged GM tail", check="close",
         atol=1e-6, rtol=1e-6),
    Case("simt_select", "vector", simt_select,
         lambda g: [randn(g, (512,)), randn(g, (512,)), sentinel((512,), torch.float32),
                    sentinel((512,), torch.uint8)],
         lambda a, b, o, f: {2: torch.where(a > b, a, b * 2), 3: (a >= 0).to(torch.uint8)},
         "SIMT compare and select, uint8 flags"),
    Case("simt_int_ops", "vector", simt_int_ops,
         lambda g: [randint(g, (512,), -2 ** 31, 2 ** 31), randint(g, (512,), -2 ** 31, 2 ** 31),
                    *(sentinel((512,), torch.int32) for _ in range(3))],
         _int_reference, "SIMT int32 add/xor/arithmetic shift/wrapping multiply/min/and/or/shift left"),
    Case("simt_row_absmax", "vector", simt_row_absmax,
         lambda g: [randn(g, (8, 64)), sentinel((8,), torch.float32)],
         lambda a, m: {1: a.abs().amax(dim=1)}, "SIMT reduce_absmax (warp all-reduce through shuffles)"),
    Case("simt_rmsnorm", "vector", simt_rmsnorm,
         lambda g: [randn(g, (32, 96), torch.bfloat16, 3.0), randn(g, (96,)), sentinel((32, 96), torch.bfloat16)],
         _rmsnorm_reference, "SIMT RMSNorm (rsqrt, BF16 in and out)", check="close", atol=1e-2, rtol=8e-3),
    Case("simt_topk_gate", "vector", simt_topk_gate,
         lambda g: [randn(g, (32, 16)), sentinel((32, 2), torch.int32), sentinel((32, 2), torch.float32)],
         _topk_reference, "SIMT top-2 gate: compare chains, exp, int32 indices", check="close",
         atol=1e-6, rtol=1e-5),
    Case("simt_online_softmax_attention", "vector", simt_online_softmax_attention,
         lambda g: [randn(g, (32, 16)), randn(g, (48, 16)), randn(g, (48, 16)), sentinel((32, 16), torch.float32)],
         _attention_reference, "SIMT online softmax (flash-attention recurrence)", check="close",
         atol=1e-5, rtol=1e-5),
]
