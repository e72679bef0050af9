"""Engram on Ascend (TileLang Ascend dialect, vector cores, SIMT): serves ``tile_kernels.engram``'s
``engram_hash``, ``fused_weight``, ``grad_w_reduce``, ``engram_gate_fwd`` and ``engram_gate_bwd``.

- engram_hash: one SIMT thread per (token, layer), see ``build_hash`` (bit-exact).
- fused_weight: ``float(wh) * float(we)``, one FP32 product per element (bit-exact).
- grad_w_reduce: ``s = sum_b partial[b]`` (FP32, in b order), then ``grad_wh += s * float(we)`` and
  ``grad_we += s * float(wh)`` in place (each product rounded before its add, as the reference).
- engram_gate_fwd: a core owns one token's ``hc`` rows. Pass 1 walks the hidden size in column tiles,
  SIMT lanes keeping per-lane partial sums of x^2, k^2 and x k w; one thread per row then adds its lanes
  and makes ``rstd = 1 / sqrt(sum / H + eps)``, ``s = dot rstd_x rstd_k H^-1/2`` and
  ``gate = sigmoid(sqrt(max(|s|, clamp)) sign(s))`` (NaN kept by explicit selects). Pass 2 writes
  ``bf16(x + gate v)``. The reference sums in another order: upstream compares with calc_diff < 2e-10.
- engram_gate_bwd: two kernels. One per token makes each row's coefficients (``d_gate = sum g v``, then the
  reference's chain: ``d_s`` 0 where ``|s| < clamp`` or s is NaN); the other walks each of ``num_blocks``
  token ranges per column tile, writing grad_x, grad_k, grad_v and the range's ``sum d_dot x k`` (the
  weight-gradient partial). Upstream compares with calc_diff < 1e-8.

Token counts and sizes are symbolic (``T.dynamic``): one lowering serves them all, per dtype pair
(fused_weight, grad_w_reduce), per ``(L, n, m)`` (hash), per ``hc`` (gate backward) and per ``(hc, eps, clamp_value)``
(gate forward; ``(hc, clamp_value)`` for the backward's row coefficients): the floats are compiled in, so a
model's fixed eps / clamp is one lowering, and each other value another.
No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from deepjit.tilelang_route.ub import padded

TILE = 4096  # elements a core takes per step of the element-wise kernels
REDUCE_COLS, REDUCE_ROWS = 1024, 8  # grad_w_reduce: columns a core owns, partial rows staged per step
GATE_LANES = 64  # SIMT lanes per (token, hc) row in the gate's reductions
HASH_TOKENS = 64  # tokens a core hashes (every layer), fewer where the rows are wide
HASH_UB_BYTES = 64 * 1024  # a core's hash tables and output rows
DTYPES = {"torch.bfloat16": "bfloat16", "torch.float32": "float32"}


@functools.cache
def build_fused_weight(wh_dtype: str, we_dtype: str):
    import tilelang.ascend.language as T

    n = T.dynamic("n")

    @T.prim_func
    def fused_weight(WH: T.Tensor((n,), wh_dtype), WE: T.Tensor((n,), we_dtype), Out: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, TILE)) as bid:
            wh = T.alloc_shared((TILE,), wh_dtype)
            we = T.alloc_shared((TILE,), we_dtype)
            out = T.alloc_shared((TILE,), "float32")
            c0 = bid * TILE
            cols = T.min(TILE, n - c0)
            T.copy(WH[c0:c0 + cols], wh[0:cols])
            T.copy(WE[c0:c0 + cols], we[0:cols])
            with T.SimtVF(threads=256):
                for i in T.Parallel(TILE):
                    out[i] = T.Cast("float32", wh[i]) * T.Cast("float32", we[i])
            T.copy(out[0:cols], Out[c0:c0 + cols])

    return fused_weight


@functools.cache
def build_grad_w_reduce(wh_dtype: str, we_dtype: str):
    import tilelang.ascend.language as T

    nb, n = T.dynamic("nb"), T.dynamic("n")
    bc, rb = REDUCE_COLS, REDUCE_ROWS

    @T.prim_func
    def grad_w_reduce(P: T.Tensor((nb, n), "float32"), WH: T.Tensor((n,), wh_dtype), WE: T.Tensor((n,), we_dtype),
                      GH: T.Tensor((n,), "float32"), GE: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, bc)) as bid:
            p = T.alloc_shared((rb, bc), "float32")
            s = T.alloc_shared((bc,), "float32")
            wh = T.alloc_shared((bc,), wh_dtype)
            we = T.alloc_shared((bc,), we_dtype)
            gh = T.alloc_shared((bc,), "float32")
            ge = T.alloc_shared((bc,), "float32")
            c0 = bid * bc
            cols = T.min(bc, n - c0)
            with T.SimtVF(threads=256):
                for c in T.Parallel(bc):
                    s[c] = 0.0
            for step in T.serial(T.ceildiv(nb, rb)):
                r0 = step * rb
                rows = T.min(rb, nb - r0)
                T.copy(P[r0:r0 + rows, c0:c0 + cols], p[0:rows, 0:cols])
                with T.SimtVF(threads=256):
                    for c in T.Parallel(bc):
                        acc = T.alloc_var("float32")
                        acc = s[c]
                        for j in T.serial(rb):
                            if j < rows:
                                acc = acc + p[j, c]
                        s[c] = acc
            T.copy(WH[c0:c0 + cols], wh[0:cols])
            T.copy(WE[c0:c0 + cols], we[0:cols])
            T.copy(GH[c0:c0 + cols], gh[0:cols])
            T.copy(GE[c0:c0 + cols], ge[0:cols])
            with T.SimtVF(threads=256):
                for c in T.Parallel(bc):
                    gh[c] = gh[c] + s[c] * T.Cast("float32", we[c])
                    ge[c] = ge[c] + s[c] * T.Cast("float32", wh[c])
            T.copy(gh[0:cols], GH[c0:c0 + cols])
            T.copy(ge[0:cols], GE[c0:c0 + cols])

    return grad_w_reduce


def gate_cols(hc: int) -> int:
    """Columns of the hidden size a gate core stages per step: x, k (BF16) and w (FP32) at most 32 KiB each."""
    return max(64, min(2048, 32 * 1024 // (4 * hc)) // 64 * 64)


def _signed_sqrt_sigmoid(T, s, clamp):
    """``sigmoid(sqrt(max(|s|, clamp)) * sign(s))`` with torch's NaN: a NaN s gives a NaN gate."""
    mag = T.abs(s)
    mag = T.if_then_else(T.Or(mag >= clamp, T.isnan(mag)), mag, clamp)
    sign = T.if_then_else(s > 0.0, T.float32(1.0), T.if_then_else(s < 0.0, T.float32(-1.0), s))
    q = T.sqrt(mag) * sign
    return 1.0 / (1.0 + T.exp(-q))


@functools.cache
def build_gate_fwd(hc: int, eps: float, clamp: float):
    import tilelang.ascend.language as T

    t, h = T.dynamic("t"), T.dynamic("h")
    bc, lanes = gate_cols(hc), GATE_LANES

    @T.prim_func
    def engram_gate_fwd(X: T.Tensor((t, hc, h), "bfloat16"), K: T.Tensor((t, hc, h), "bfloat16"),
                        V: T.Tensor((t, h), "bfloat16"), W: T.Tensor((hc, h), "float32"),
                        Out: T.Tensor((t, hc, h), "bfloat16"), Dot: T.Tensor((t, hc), "float32"),
                        Gate: T.Tensor((t, hc), "float32"), RstdX: T.Tensor((t, hc), "float32"),
                        RstdK: T.Tensor((t, hc), "float32")):
        with T.Kernel(t) as tok:
            x = T.alloc_shared((hc, bc), "bfloat16")
            k = T.alloc_shared((hc, bc), "bfloat16")
            w = T.alloc_shared((hc, bc), "float32")
            v = T.alloc_shared((bc,), "bfloat16")
            out = T.alloc_shared((hc, bc), "bfloat16")
            sxx = T.alloc_shared((hc, lanes), "float32")
            skk = T.alloc_shared((hc, lanes), "float32")
            sxk = T.alloc_shared((hc, lanes), "float32")
            row = T.alloc_shared((4, 8 * hc), "float32")  # dot, gate, rstd_x, rstd_k of each row
            with T.SimtVF(threads=min(256, hc * lanes)):
                for r, ln in T.Parallel(hc, lanes):
                    sxx[r, ln] = 0.0
                    skk[r, ln] = 0.0
                    sxk[r, ln] = 0.0
            for step in T.serial(T.ceildiv(h, bc)):
                c0 = step * bc
                cols = T.min(bc, h - c0)
                T.copy(X[tok, :, c0:c0 + cols], x[:, 0:cols])
                T.copy(K[tok, :, c0:c0 + cols], k[:, 0:cols])
                T.copy(W[:, c0:c0 + cols], w[:, 0:cols])
                with T.SimtVF(threads=min(256, hc * lanes)):
                    for r, ln in T.Parallel(hc, lanes):
                        a = T.alloc_var("float32")
                        b = T.alloc_var("float32")
                        for j in T.serial(bc // lanes):
                            c = j * lanes + ln
                            if c < cols:
                                a = T.Cast("float32", x[r, c])
                                b = T.Cast("float32", k[r, c])
                                sxx[r, ln] = sxx[r, ln] + a * a
                                skk[r, ln] = skk[r, ln] + b * b
                                sxk[r, ln] = sxk[r, ln] + a * b * w[r, c]
            with T.SimtVF(threads=min(256, hc)):
                for r in T.Parallel(hc):
                    xx = T.alloc_var("float32")
                    kk = T.alloc_var("float32")
                    dot = T.alloc_var("float32")
                    xx = 0.0
                    kk = 0.0
                    dot = 0.0
                    for ln in T.serial(lanes):
                        xx = xx + sxx[r, ln]
                        kk = kk + skk[r, ln]
                        dot = dot + sxk[r, ln]
                    hf = T.Cast("float32", h)
                    rx = 1.0 / T.sqrt(xx / hf + T.float32(eps))
                    rk = 1.0 / T.sqrt(kk / hf + T.float32(eps))
                    s = dot * rx * rk * (1.0 / T.sqrt(hf))
                    row[0, r] = dot
                    row[1, r] = _signed_sqrt_sigmoid(T, s, T.float32(clamp))
                    row[2, r] = rx
                    row[3, r] = rk
            T.copy(row[0, 0:hc], Dot[tok, :])
            T.copy(row[1, 0:hc], Gate[tok, :])
            T.copy(row[2, 0:hc], RstdX[tok, :])
            T.copy(row[3, 0:hc], RstdK[tok, :])
            for step in T.serial(T.ceildiv(h, bc)):
                c0 = step * bc
                cols = T.min(bc, h - c0)
                T.copy(X[tok, :, c0:c0 + cols], x[:, 0:cols])
                T.copy(V[tok, c0:c0 + cols], v[0:cols])
                with T.SimtVF(threads=256):
                    for r, c in T.Parallel(hc, bc):
                        out[r, c] = T.Cast("bfloat16", T.Cast("float32", x[r, c]) + row[1, r] * T.Cast("float32", v[c]))
                T.copy(out[:, 0:cols], Out[tok, :, c0:c0 + cols])

    return engram_gate_fwd


@functools.cache
def build_gate_bwd_rows(hc: int, clamp: float):
    """Per (token, row) coefficients of the backward, ``Coef (t, 4, hc)``: ``d_dot``, ``d_rx rstd_x^3 / H``,
    ``d_rk rstd_k^3 / H`` and the gate, from ``d_gate = sum_c g v`` (lane partials, as the forward)."""
    import tilelang.ascend.language as T

    t, h = T.dynamic("t"), T.dynamic("h")
    bc, lanes = gate_cols(hc), GATE_LANES

    @T.prim_func
    def engram_gate_bwd_rows(G: T.Tensor((t, hc, h), "bfloat16"), V: T.Tensor((t, h), "bfloat16"),
                             Dot: T.Tensor((t, hc), "float32"), Gate: T.Tensor((t, hc), "float32"),
                             RstdX: T.Tensor((t, hc), "float32"), RstdK: T.Tensor((t, hc), "float32"),
                             Coef: T.Tensor((t, 4, hc), "float32")):
        with T.Kernel(t) as tok:
            g = T.alloc_shared((hc, bc), "bfloat16")
            v = T.alloc_shared((bc,), "bfloat16")
            sgv = T.alloc_shared((hc, lanes), "float32")
            saved = T.alloc_shared((4, 8 * hc), "float32")  # dot, gate, rstd_x, rstd_k
            coef = T.alloc_shared((4, 8 * hc), "float32")
            T.copy(Dot[tok, :], saved[0, 0:hc])
            T.copy(Gate[tok, :], saved[1, 0:hc])
            T.copy(RstdX[tok, :], saved[2, 0:hc])
            T.copy(RstdK[tok, :], saved[3, 0:hc])
            with T.SimtVF(threads=min(256, hc * lanes)):
                for r, ln in T.Parallel(hc, lanes):
                    sgv[r, ln] = 0.0
            for step in T.serial(T.ceildiv(h, bc)):
                c0 = step * bc
                cols = T.min(bc, h - c0)
                T.copy(G[tok, :, c0:c0 + cols], g[:, 0:cols])
                T.copy(V[tok, c0:c0 + cols], v[0:cols])
                with T.SimtVF(threads=min(256, hc * lanes)):
                    for r, ln in T.Parallel(hc, lanes):
                        for j in T.serial(bc // lanes):
                            c = j * lanes + ln
                            if c < cols:
                                sgv[r, ln] = sgv[r, ln] + T.Cast("float32", g[r, c]) * T.Cast("float32", v[c])
            with T.SimtVF(threads=min(256, hc)):
                for r in T.Parallel(hc):
                    d_gate = T.alloc_var("float32")
                    d_gate = 0.0
                    for ln in T.serial(lanes):
                        d_gate = d_gate + sgv[r, ln]
                    dot, gate, rx, rk = saved[0, r], saved[1, r], saved[2, r], saved[3, r]
                    hf = T.Cast("float32", h)
                    scale = 1.0 / T.sqrt(hf)
                    s = dot * rx * rk * scale
                    d_q = d_gate * gate * (1.0 - gate)
                    mag = T.abs(s)
                    # torch.where(mag >= clamp, ...): a NaN s takes the 0 branch
                    d_s = T.if_then_else(mag >= T.float32(clamp),
                                         d_q / (2.0 * T.sqrt(T.if_then_else(mag >= T.float32(clamp), mag,
                                                                            T.float32(clamp)))), T.float32(0.0))
                    coef[0, r] = d_s * rx * rk * scale
                    coef[1, r] = d_s * dot * rk * scale * (rx * rx * rx) / hf
                    coef[2, r] = d_s * dot * rx * scale * (rk * rk * rk) / hf
                    coef[3, r] = gate
            T.copy(coef[:, 0:hc], Coef[tok, :, :])

    return engram_gate_bwd_rows


@functools.cache
def build_gate_bwd(hc: int):
    """The gradients from the per-row coefficients. Core ``(i, column tile)`` walks block i's tokens
    ``[t i / nb, t (i + 1) / nb)`` in order, writing their grad_x, grad_k, grad_v columns and summing
    ``d_dot x k`` into block i's row of ``Partial (nb, hc, h)`` (zeros for an empty range)."""
    import tilelang.ascend.language as T

    t, h, nb = T.dynamic("t"), T.dynamic("h"), T.dynamic("nb")
    bc = gate_cols(hc) // 2

    @T.prim_func
    def engram_gate_bwd(G: T.Tensor((t, hc, h), "bfloat16"), X: T.Tensor((t, hc, h), "bfloat16"),
                        K: T.Tensor((t, hc, h), "bfloat16"), V: T.Tensor((t, h), "bfloat16"),
                        W: T.Tensor((hc, h), "float32"), Coef: T.Tensor((t, 4, hc), "float32"),
                        GradX: T.Tensor((t, hc, h), "bfloat16"), GradK: T.Tensor((t, hc, h), "bfloat16"),
                        GradV: T.Tensor((t, h), "bfloat16"), Partial: T.Tensor((nb, hc, h), "float32")):
        with T.Kernel(nb * T.ceildiv(h, bc)) as bid:
            g = T.alloc_shared((hc, bc), "bfloat16")
            x = T.alloc_shared((hc, bc), "bfloat16")
            k = T.alloc_shared((hc, bc), "bfloat16")
            v = T.alloc_shared((bc,), "bfloat16")
            w = T.alloc_shared((hc, bc), "float32")
            coef = T.alloc_shared((4, 8 * hc), "float32")
            gx = T.alloc_shared((hc, bc), "bfloat16")
            gk = T.alloc_shared((hc, bc), "bfloat16")
            gv = T.alloc_shared((bc,), "bfloat16")
            acc = T.alloc_shared((hc, bc), "float32")
            blk = bid // T.ceildiv(h, bc)
            c0 = (bid % T.ceildiv(h, bc)) * bc
            cols = T.min(bc, h - c0)
            lo = t * blk // nb
            hi = t * (blk + 1) // nb
            T.copy(W[:, c0:c0 + cols], w[:, 0:cols])
            with T.SimtVF(threads=256):
                for r, c in T.Parallel(hc, bc):
                    acc[r, c] = 0.0
            for i in T.serial(hi - lo):
                tok = lo + i
                T.copy(G[tok, :, c0:c0 + cols], g[:, 0:cols])
                T.copy(X[tok, :, c0:c0 + cols], x[:, 0:cols])
                T.copy(K[tok, :, c0:c0 + cols], k[:, 0:cols])
                T.copy(V[tok, c0:c0 + cols], v[0:cols])
                T.copy(Coef[tok, :, :], coef[:, 0:hc])
                with T.SimtVF(threads=256):
                    for r, c in T.Parallel(hc, bc):
                        gf = T.Cast("float32", g[r, c])
                        xf = T.Cast("float32", x[r, c])
                        kf = T.Cast("float32", k[r, c])
                        d_dot = coef[0, r]
                        gx[r, c] = T.Cast("bfloat16", gf + d_dot * kf * w[r, c] - coef[1, r] * xf)
                        gk[r, c] = T.Cast("bfloat16", d_dot * xf * w[r, c] - coef[2, r] * kf)
                        acc[r, c] = acc[r, c] + d_dot * xf * kf
                with T.SimtVF(threads=min(bc, 256)):
                    for c in T.Parallel(bc):
                        sv = T.alloc_var("float32")
                        sv = 0.0
                        for r in T.serial(hc):
                            sv = sv + T.Cast("float32", g[r, c]) * coef[3, r]
                        gv[c] = T.Cast("bfloat16", sv)
                T.copy(gx[:, 0:cols], GradX[tok, :, c0:c0 + cols])
                T.copy(gk[:, 0:cols], GradK[tok, :, c0:c0 + cols])
                T.copy(gv[0:cols], GradV[tok, c0:c0 + cols])
            T.copy(acc[:, 0:cols], Partial[blk, :, c0:c0 + cols])

    return engram_gate_bwd


@functools.cache
def build_hash(num_layers: int, n: int, m: int):
    """``Out (L, t, (n-1) m)`` int32. One SIMT thread per token and layer: ``h`` in uint64 (the products and
    xors wrap), read as int64 for the floor modulo (torch.remainder: in ``[0, vocab)``), plus the offset in
    int64, truncated to int32 as the reference's ``.to(torch.int32)``. A vocab size <= 0 (refused on CPU
    tensors; device values are not read on the host) yields just the offset: no division by zero."""
    import tilelang.ascend.language as T

    t = T.dynamic("t")
    width = (n - 1) * m
    bt = max(1, min(HASH_TOKENS, HASH_UB_BYTES // (num_layers * padded(width, 4) * 4) - 2))

    @T.prim_func
    def engram_hash(Ids: T.Tensor((t, n), "int32"), Mult: T.Tensor((num_layers, n), "int64"),
                    Vocab: T.Tensor((num_layers, width), "int32"), Offsets: T.Tensor((num_layers, width), "int32"),
                    Out: T.Tensor((num_layers, t, width), "int32")):
        with T.Kernel(T.ceildiv(t, bt)) as bid:
            ids = T.alloc_shared((bt, padded(n, 4)), "int32")
            mult = T.alloc_shared((num_layers, padded(n, 8)), "int64")
            vocab = T.alloc_shared((num_layers, padded(width, 4)), "int32")
            offsets = T.alloc_shared((num_layers, padded(width, 4)), "int32")
            out = T.alloc_shared((num_layers, bt, padded(width, 4)), "int32")
            t0 = bid * bt
            rows = T.min(bt, t - t0)
            T.copy(Ids[t0:t0 + rows, :], ids[0:rows, 0:n])
            T.copy(Mult[:, :], mult[:, 0:n])
            T.copy(Vocab[:, :], vocab[:, 0:width])
            T.copy(Offsets[:, :], offsets[:, 0:width])
            with T.SimtVF(threads=min(256, bt * num_layers)):
                for lyr, r in T.Parallel(num_layers, bt):
                    h = T.alloc_var("uint64")
                    h = T.Cast("uint64", T.Cast("int64", ids[r, 0])) * T.reinterpret(mult[lyr, 0], "uint64")
                    for i in T.serial(1, n):
                        h = T.bitwise_xor(h, T.Cast("uint64", T.Cast("int64", ids[r, i]))
                                          * T.reinterpret(mult[lyr, i], "uint64"))
                        hs = T.reinterpret(h, "int64")
                        for j in T.serial(m):
                            c = (i - 1) * m + j
                            vs = T.Cast("int64", vocab[lyr, c])
                            # % is TVM's floor modulo (lowered with its sign fix-up), in [0, vs) for vs > 0;
                            # a vocab size <= 0 (not checked on device tensors) gives the offset, no division
                            rem = T.if_then_else(vs > 0, hs % T.max(vs, T.int64(1)), T.int64(0))
                            out[lyr, r, c] = T.Cast("int32", rem + T.Cast("int64", offsets[lyr, c]))
            for lyr in T.serial(num_layers):
                T.copy(out[lyr, 0:rows, 0:width], Out[lyr, t0:t0 + rows, :])

    return engram_hash


MAX_HC = 64  # a gate core's UB holds (hc, 64..2048) tiles and (hc, 64) lane partials of every row


def gate_fits(hidden_states, *_) -> bool:
    """The gate kernels' form: a hidden size to reduce and at most MAX_HC rows a token."""
    return hidden_states.shape[-1] > 0 and hidden_states.shape[1] <= MAX_HC


def _dtype(x) -> str:
    return DTYPES[str(x.dtype)]


def fused_weight(weight_hidden, weight_embed):
    """``tile_kernels.engram.fused_weight``: FP32 ``(hc, H)``."""
    import torch

    from .._lib import LIB

    out = torch.empty(weight_hidden.shape, dtype=torch.float32, device=weight_hidden.device)
    if out.numel():
        LIB.run_tilelang(build_fused_weight, (_dtype(weight_hidden), _dtype(weight_embed)),
                       weight_hidden.contiguous().view(-1), weight_embed.contiguous().view(-1), out.view(-1))
    return out


def grad_w_reduce(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed) -> None:
    """``tile_kernels.engram.grad_w_reduce`` on contiguous gradient outputs (updated in place)."""
    from .._lib import LIB

    nb = grad_w_partial.shape[0]
    n = weight_hidden.numel()
    if not n:
        return
    # nb == 0 still runs: s = 0 adds 0 * w (NaN where w is inf), as the reference
    LIB.run_tilelang(build_grad_w_reduce, (_dtype(weight_hidden), _dtype(weight_embed)),
                   grad_w_partial.contiguous().view(nb, n), weight_hidden.contiguous().view(-1),
                   weight_embed.contiguous().view(-1), grad_weight_hidden.view(-1), grad_weight_embed.view(-1))


def engram_gate_fwd(hidden_states, k, v, weight_fused, eps, clamp_value, save_for_backward=True):
    """``tile_kernels.engram.engram_gate_fwd``: ``(out, dot, gate_score, rstd_x, rstd_k)`` (None unless saved)."""
    import torch

    from .._lib import LIB

    t, hc, h = hidden_states.shape
    dev = hidden_states.device
    out = torch.empty((t, hc, h), dtype=torch.bfloat16, device=dev)
    saved = [torch.empty((t, hc), dtype=torch.float32, device=dev) for _ in range(4)]
    if out.numel():
        LIB.run_tilelang(build_gate_fwd, (hc, float(eps), float(clamp_value)), hidden_states.contiguous(),
                       k.contiguous(), v.contiguous(), weight_fused.contiguous(), out, *saved)
    return (out, *saved) if save_for_backward else (out, None, None, None, None)


def engram_gate_bwd(grad_out, hidden_states, k, v, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
                    num_blocks):
    """``tile_kernels.engram.engram_gate_bwd``: ``(grad_x, grad_k, grad_v, grad_w_partial (num_blocks, hc, H))``."""
    import torch

    from .._lib import LIB

    t, hc, h = hidden_states.shape
    dev = hidden_states.device
    grad_x = torch.empty((t, hc, h), dtype=torch.bfloat16, device=dev)
    grad_k = torch.empty((t, hc, h), dtype=torch.bfloat16, device=dev)
    grad_v = torch.empty((t, h), dtype=torch.bfloat16, device=dev)
    partial = torch.empty((num_blocks, hc, h), dtype=torch.float32, device=dev)  # every block row is written
    if not (hc and h):
        return grad_x, grad_k, grad_v.zero_(), partial
    grad_out, v = grad_out.contiguous(), v.contiguous()
    coef = torch.empty((t, 4, hc), dtype=torch.float32, device=dev)
    if t:
        LIB.run_tilelang(build_gate_bwd_rows, (hc, float(clamp_value)), grad_out, v, dot.contiguous(),
                       gate_score.contiguous(), rstd_x.contiguous(), rstd_k.contiguous(), coef)
    LIB.run_tilelang(build_gate_bwd, (hc,), grad_out, hidden_states.contiguous(), k.contiguous(), v,
                   weight_fused.contiguous(), coef, grad_x, grad_k, grad_v, partial)
    return grad_x, grad_k, grad_v, partial


def hash_fits(ngram_token_ids, multipliers, vocab_sizes, offsets) -> bool:
    """Whether every layer's tables (and one token's rows) fit a core's UB budget."""
    return multipliers.shape[0] * padded(offsets.shape[1], 4) * 4 * 3 <= HASH_UB_BYTES


def engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets):
    """``tile_kernels.engram.engram_hash``: int32 ``(L, T, (N-1) M)`` table rows."""
    import torch

    from .._lib import LIB

    t, n = ngram_token_ids.shape
    num_layers, m = multipliers.shape[0], vocab_sizes.shape[2]
    out = torch.empty((num_layers, t, (n - 1) * m), dtype=torch.int32, device=ngram_token_ids.device)
    if out.numel():
        LIB.run_tilelang(build_hash, (num_layers, n, m), ngram_token_ids.contiguous(), multipliers.contiguous(),
                       vocab_sizes.contiguous().view(num_layers, -1), offsets.contiguous(), out)
    return out
