"""``tile_kernels.quant.swiglu_backward_and_per_token_cast`` on Ascend (TileLang Ascend dialect, vector
cores, SIMT) as one kernel: the SwiGLU backward and the per-token E4M3 cast of its FP32 input gradient,
fused as the forward's SwiGLU is into the cast kernel (``block_cast.Swiglu``).

A core owns ``ROWS`` rows and walks their columns in chunks of ``COLS``. Per element, in FP32 and in the
reference's operation order (``reference/swiglu.swiglu_backward``): ``a``, ``b`` dequantised (``q * sf``),
optionally clamped; ``denom = 1 + exp_f32(-a)``, ``sig = 1 / denom``; ``gws = g * w * sig``;
``da = gws * b * fma(a, 1 - sig, 1)``, ``db = gws * a`` (0 where clamped); ``act = a / denom * b``,
``out = act * w``. The row's ``sum(g * act)`` lands at ``weight_grad[pos_to_token_topk[row]]``; as in
upstream's kernel (a per-thread partial over 64 threads, then a tree), ``LANES`` partial sums per row each
take every ``LANES``-th column and a pairwise tree joins them. One serial FP32 sum over H columns is not
enough: its rounding error grows with the partial sums' size, and a row whose sum cancels (H = 2048, terms
of size ~5, sum ~0.03) misses upstream's atol = rtol = 1e-4, which the reference's torch sum meets.

The cast of a chunk's FP32 ``[da | db]`` follows in UB, one SIMT thread per ``(row, scale block)``: the
block's NaN-keeping amax floored at 1e-4, its scale and multiplier, the E4M3 bytes (``block_cast``'s
arithmetic, so bit-exact with ``reference/cast.cast``); the row's FP32 scales leave once, at the end. The op
accepts ``H % npc == 0`` with ``npc`` in (32, 128), so a chunk (``min(H, COLS)`` columns, the last one
possibly fewer, still a multiple of ``npc``) always holds whole scale blocks: no input needs a second launch.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from deepjit.tilelang_route.ub import padded

from .block_cast import CLAMP_MIN, FMT_MAX, clamp_gate, clamp_up, e4m3_byte, exp_f32, nan_max, scale_inv, scale_of

ROWS, COLS = 8, 256
LANES = 64  # weight_grad partial sums per row


@functools.cache
def build(rows: int, h: int, npc: int, g_dtype: str, num_weights: int, clamp: float | None, round_sf: bool):
    import tilelang.ascend.language as T

    br = min(rows, ROWS)
    hc = min(h, COLS)
    if h % npc or hc % npc:
        raise ValueError(f"a column chunk must hold whole scale blocks: H={h}, chunk {hc}, npc={npc}")
    nsf = 2 * h // npc
    nb = hc // npc  # scale blocks per half (da or db) of a chunk
    fmax, cmin = FMT_MAX["e4m3"], CLAMP_MIN["e4m3"]
    tree_steps = tuple(LANES >> k for k in range(1, LANES.bit_length()))  # 32, 16, ..., 1

    @T.prim_func
    def swiglu_backward_per_token_cast(
            Q: T.Tensor((rows, 2 * h), "float8_e4m3fn"), SF: T.Tensor((rows, nsf), "float32"),
            G: T.Tensor((rows, h), g_dtype), W: T.Tensor((num_weights,), "float32"), P2TT: T.Tensor((rows,), "int32"),
            Out: T.Tensor((rows, h), g_dtype), XG: T.Tensor((rows, 2 * h), g_dtype),
            XQ: T.Tensor((rows, 2 * h), "uint8"), XSF: T.Tensor((rows, nsf), "float32"),
            WG: T.Tensor((num_weights,), "float32")):
        with T.Kernel(T.ceildiv(rows, br)) as bid:
            qa = T.alloc_shared((br, hc), "float8_e4m3fn")
            qb = T.alloc_shared((br, hc), "float8_e4m3fn")
            sf = T.alloc_shared((br, padded(nsf, 4)), "float32")
            g = T.alloc_shared((br, hc), g_dtype)
            out = T.alloc_shared((br, hc), g_dtype)
            xga = T.alloc_shared((br, hc), g_dtype)
            xgb = T.alloc_shared((br, hc), g_dtype)
            x32 = T.alloc_shared((br, 2 * hc), "float32")  # [da | db] of the chunk, the cast's input
            xq = T.alloc_shared((br, 2 * hc), "uint8")
            xsf = T.alloc_shared((br, padded(nsf, 4)), "float32")
            ga = T.alloc_shared((br, hc), "float32")  # g * act, summed per row below
            p2tt = T.alloc_shared((padded(br, 4),), "int32")
            rw = T.alloc_shared((br, 8), "float32")  # a row's weight / weight_grad, each in its own 32-byte block
            rs = T.alloc_shared((br, LANES), "float32")  # a row's weight_grad partial sums
            r0 = bid * br
            nr = T.min(br, rows - r0)
            T.copy(SF[r0:r0 + nr, :], sf[0:nr, 0:nsf])
            T.copy(P2TT[r0:r0 + nr], p2tt[0:nr])
            for r in T.serial(nr):
                if T.And(p2tt[r] >= 0, p2tt[r] < num_weights):  # out of range: weight 0 and no grad, as -1
                    T.copy(W[p2tt[r]:p2tt[r] + 1], rw[r, 0:1])
            with T.SimtVF(threads=min(256, br * LANES)):
                for r, lane in T.Parallel(br, LANES):
                    rs[r, lane] = 0.0
            for chunk in T.serial(T.ceildiv(h, hc)):
                c0 = chunk * hc
                nc = T.min(hc, h - c0)
                T.copy(Q[r0:r0 + nr, c0:c0 + nc], qa[0:nr, 0:nc])
                T.copy(Q[r0:r0 + nr, h + c0:h + c0 + nc], qb[0:nr, 0:nc])
                T.copy(G[r0:r0 + nr, c0:c0 + nc], g[0:nr, 0:nc])
                with T.SimtVF(threads=min(256, br * hc)):
                    for r, c in T.Parallel(br, hc):
                        w = T.if_then_else(T.And(p2tt[r] >= 0, p2tt[r] < num_weights), rw[r, 0], T.float32(0.0))
                        a = T.alloc_var("float32")
                        b = T.alloc_var("float32")
                        a = T.Cast("float32", qa[r, c]) * sf[r, (c0 + c) // npc]
                        b = T.Cast("float32", qb[r, c]) * sf[r, (h + c0 + c) // npc]
                        a_cl = T.alloc_var("int32")
                        b_cl = T.alloc_var("int32")
                        a_cl = 0
                        b_cl = 0
                        if clamp is not None:
                            a_cl = T.if_then_else(a > clamp, 1, 0)
                            b_cl = T.if_then_else(T.Or(b > clamp, b < -clamp), 1, 0)
                            a = clamp_gate(T, a, clamp)
                            b = clamp_up(T, b, clamp)
                        denom = T.alloc_var("float32")
                        denom = 1.0 + exp_f32(T, -a)
                        sig = T.alloc_var("float32")
                        sig = 1.0 / denom
                        gws = T.alloc_var("float32")
                        gws = T.Cast("float32", g[r, c]) * w * sig
                        da = gws * b * T.call_extern("float32", "fmaf", a, 1.0 - sig, T.float32(1.0))
                        db = gws * a
                        da = T.if_then_else(a_cl != 0, T.float32(0.0), da)
                        db = T.if_then_else(b_cl != 0, T.float32(0.0), db)
                        act = T.alloc_var("float32")
                        act = a / denom * b
                        out[r, c] = T.Cast(g_dtype, act * w)
                        ga[r, c] = T.Cast("float32", g[r, c]) * act
                        x32[r, c] = da
                        x32[r, hc + c] = db
                        xga[r, c] = T.Cast(g_dtype, da)
                        xgb[r, c] = T.Cast(g_dtype, db)
                with T.SimtVF(threads=min(256, br * LANES)):
                    for r, lane in T.Parallel(br, LANES):
                        for j in T.serial(T.ceildiv(hc, LANES)):
                            if j * LANES + lane < nc:
                                rs[r, lane] = rs[r, lane] + ga[r, j * LANES + lane]
                with T.SimtVF(threads=min(256, br * 2 * nb)):
                    for r, kk in T.Parallel(br, 2 * nb):
                        amax = T.alloc_var("float32")
                        amax = cmin
                        for j in T.serial(npc):
                            amax = nan_max(T, amax, T.abs(x32[r, kk * npc + j]))
                        s = T.alloc_var("float32")
                        s = scale_of(T, amax, fmax, round_sf)
                        inv = T.alloc_var("float32")
                        inv = scale_inv(T, s, amax, fmax, round_sf)
                        v = T.alloc_var("float32")  # a scalar: SIMT has no vector form of the byte select
                        for j in T.serial(npc):
                            v = x32[r, kk * npc + j] * inv
                            xq[r, kk * npc + j] = e4m3_byte(T, v, fmax)
                        if (kk % nb) * npc < nc:  # blocks past a ragged last chunk hold stale columns
                            xsf[r, T.if_then_else(kk < nb, c0 // npc + kk, (h + c0) // npc + kk - nb)] = s
                T.copy(out[0:nr, 0:nc], Out[r0:r0 + nr, c0:c0 + nc])
                T.copy(xga[0:nr, 0:nc], XG[r0:r0 + nr, c0:c0 + nc])
                T.copy(xgb[0:nr, 0:nc], XG[r0:r0 + nr, h + c0:h + c0 + nc])
                T.copy(xq[0:nr, 0:nc], XQ[r0:r0 + nr, c0:c0 + nc])
                T.copy(xq[0:nr, hc:hc + nc], XQ[r0:r0 + nr, h + c0:h + c0 + nc])
            T.copy(xsf[0:nr, 0:nsf], XSF[r0:r0 + nr, :])
            for step in tree_steps:  # the partials' pairwise tree, one level per SIMT section (unrolled)
                with T.SimtVF(threads=min(256, br * step)):
                    for r, lane in T.Parallel(br, step):
                        rs[r, lane] = rs[r, lane] + rs[r, lane + step]
            for r in T.serial(nr):
                if T.And(p2tt[r] >= 0, p2tt[r] < num_weights):
                    T.copy(rs[r, 0:1], WG[p2tt[r]:p2tt[r] + 1])

    return swiglu_backward_per_token_cast


def swiglu_backward_and_per_token_cast(q, sf, grad_out, weight, pos_to_token_topk, token_topk_to_pos,
                                       num_per_channels: int, round_sf: bool = False, clamp=None):
    """``(out, (x_grad_q, x_grad_sf), x_grad, weight_grad)`` as ``tile_kernels.quant.
    swiglu_backward_and_per_token_cast``; ``token_topk_to_pos`` is not read (as upstream's kernel)."""
    import torch

    from .._lib import LIB

    h2 = q.shape[-1]
    h = h2 // 2
    rows = q.numel() // h2 if h2 else 0
    dev = q.device
    out = torch.empty((rows, h), dtype=grad_out.dtype, device=dev)
    x_grad = torch.empty((rows, h2), dtype=grad_out.dtype, device=dev)
    x_grad_q = torch.empty((rows, h2), dtype=torch.float8_e4m3fn, device=dev)
    x_grad_sf = torch.empty((rows, h2 // num_per_channels), dtype=torch.float32, device=dev)
    weight_grad = torch.zeros(weight.shape, dtype=torch.float32, device=dev)
    if rows and h:
        g_dtype = "bfloat16" if grad_out.dtype == torch.bfloat16 else "float32"
        args = (rows, h, num_per_channels, g_dtype, weight.numel(), None if clamp is None else float(clamp),
                bool(round_sf))
        LIB.run_tilelang(build, args, q.reshape(rows, h2), sf, grad_out.reshape(rows, h), weight.contiguous().view(-1),
                       pos_to_token_topk, out, x_grad, x_grad_q.view(torch.uint8), x_grad_sf, weight_grad.view(-1))
    return out, (x_grad_q, x_grad_sf), x_grad, weight_grad
