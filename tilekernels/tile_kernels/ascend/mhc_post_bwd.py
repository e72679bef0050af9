"""The backward of ``mhc_post`` on Ascend (TileLang Ascend dialect, vector cores, SIMT): serves the table op
``mhc_post_bwd`` for a BF16 or FP32 output gradient ``g``.

Per token, with ``post (m)``, ``comb (m, m)``, ``x (H)``, ``residual (m, H)`` and ``g (m, H)``:
- ``d_x[c] = sum_n g[n, c] * post[n]`` and ``d_residual[i, c] = sum_n comb[i, n] * g[n, c]`` (FP32 in stream
  order, RNE to BF16): one SIMT thread per column;
- ``d_post[n] = sum_c g[n, c] * x[c]`` and ``d_comb[i, n] = sum_c g[n, c] * residual[i, c]`` (FP32): one SIMT
  thread per output, summing the columns in order across the column tiles with a compensated (Kahan) sum,
  so 7168 columns stay within upstream's 1e-4 of the reference's GEMM (a plain running sum does not).
A core owns one token and walks its hidden size in 1024-column tiles. Token count and hidden size are
symbolic: one lowering per (m, g dtype). NaN and +-Inf propagate through the arithmetic as in torch.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from .mhc_mix import compensated_sum, serves_streams

COL_TILE = 1024


@functools.cache
def build(m: int, g_dtype: str):
    import tilelang.ascend.language as T

    t, tm, tmm, h = T.dynamic("t"), T.dynamic("tm"), T.dynamic("tmm"), T.dynamic("h")
    hc = COL_TILE
    sums = m + m * m  # d_post then d_comb, one thread each
    width_sum = compensated_sum(T)

    @T.prim_func
    def mhc_post_bwd(X: T.Tensor((t, h), "bfloat16"), Res: T.Tensor((tm, h), "bfloat16"),
                     Post: T.Tensor((tm,), "float32"), Comb: T.Tensor((tmm,), "float32"),
                     G: T.Tensor((tm, h), g_dtype), DX: T.Tensor((t, h), "bfloat16"),
                     DRes: T.Tensor((tm, h), "bfloat16"), DPost: T.Tensor((tm,), "float32"),
                     DComb: T.Tensor((tmm,), "float32")):
        with T.Kernel(t) as tok:
            x = T.alloc_shared((1, hc), "bfloat16")
            res = T.alloc_shared((m, hc), "bfloat16")
            g = T.alloc_shared((m, hc), g_dtype)
            dx = T.alloc_shared((1, hc), "bfloat16")
            dres = T.alloc_shared((m, hc), "bfloat16")
            post = T.alloc_shared((m + 8,), "float32")
            comb = T.alloc_shared((m * m + 8,), "float32")
            dpost = T.alloc_shared((m + 8,), "float32")
            dcomb = T.alloc_shared((m * m + 8,), "float32")
            epost = T.alloc_shared((m + 8,), "float32")  # the sums' carried rounding errors
            ecomb = T.alloc_shared((m * m + 8,), "float32")
            T.copy(Post[tok * m:tok * m + m], post[0:m])
            T.copy(Comb[tok * m * m:tok * m * m + m * m], comb[0:m * m])
            with T.SimtVF(threads=sums):
                for k in T.Parallel(sums):
                    if k < m:
                        dpost[k] = 0.0
                        epost[k] = 0.0
                    else:
                        dcomb[k - m] = 0.0
                        ecomb[k - m] = 0.0
            for ci in T.serial(T.ceildiv(h, hc)):
                c0 = ci * hc
                cols = T.min(hc, h - c0)
                T.copy(X[tok:tok + 1, c0:c0 + cols], x[0:1, 0:cols])
                T.copy(Res[tok * m:tok * m + m, c0:c0 + cols], res[0:m, 0:cols])
                T.copy(G[tok * m:tok * m + m, c0:c0 + cols], g[0:m, 0:cols])
                with T.SimtVF(threads=256):
                    for c in T.Parallel(hc):
                        s = T.alloc_var("float32")
                        s = 0.0
                        for n in T.serial(m):
                            s = s + T.Cast("float32", g[n, c]) * post[n]
                        dx[0, c] = T.Cast("bfloat16", s)
                        for i in T.serial(m):
                            s = 0.0
                            for n in T.serial(m):
                                s = s + comb[i * m + n] * T.Cast("float32", g[n, c])
                            dres[i, c] = T.Cast("bfloat16", s)
                with T.SimtVF(threads=sums):
                    for k in T.Parallel(sums):
                        if k < m:
                            width_sum(cols, lambda c, k=k: T.Cast("float32", g[k, c]) * T.Cast("float32", x[0, c]),
                                      dpost, epost, k)
                        else:
                            width_sum(cols, lambda c, k=k: T.Cast("float32", g[(k - m) % m, c])
                                      * T.Cast("float32", res[(k - m) // m, c]), dcomb, ecomb, k - m)
                T.copy(dx[0:1, 0:cols], DX[tok:tok + 1, c0:c0 + cols])
                T.copy(dres[0:m, 0:cols], DRes[tok * m:tok * m + m, c0:c0 + cols])
            T.copy(dpost[0:m], DPost[tok * m:tok * m + m])
            T.copy(dcomb[0:m * m], DComb[tok * m * m:tok * m * m + m * m])

    return mhc_post_bwd


def accepts(x, residual, *_) -> bool:
    return serves_streams(residual.shape[2])


def post_bwd(x, residual, post_layer_mix, comb_res_mix, d_o):
    """``(d_x, d_residual, d_post_layer_mix, d_comb_res_mix)`` of ``mhc_post_fwd``."""
    import torch

    from .._lib import LIB

    s, t, m, h = residual.shape
    dev = residual.device
    d_x = torch.empty(s, t, h, dtype=torch.bfloat16, device=dev)
    d_res = torch.empty(s, t, m, h, dtype=torch.bfloat16, device=dev)
    d_post, d_comb = torch.zeros(s, t, m, 1, device=dev), torch.zeros(s, t, m, m, device=dev)
    n = s * t
    if n and h:  # zero width: the width sums stay 0
        g_dtype = "bfloat16" if d_o.dtype == torch.bfloat16 else "float32"
        LIB.run_tilelang(build, (m, g_dtype), x.contiguous().view(n, h), residual.contiguous().view(n * m, h),
                       post_layer_mix.contiguous().view(n * m), comb_res_mix.contiguous().view(n * m * m),
                       d_o.contiguous().view(n * m, h), d_x.view(n, h), d_res.view(n * m, h), d_post.view(n * m),
                       d_comb.view(n * m * m))
    return d_x, d_res, d_post, d_comb
