"""The mHC pre-norm projection on Ascend (TileLang Ascend dialect): serves the table op ``mhc_projection``
(the GEMM step of ``mhc_pre_norm_fn`` and ``mhc_pre_big_fuse``).

For the flattened BF16 residual ``r (T, K = m * H)`` and FP32 ``fn (m3, K)`` (TF32 values, as the callers
pass them): ``mul = r @ fn.T`` and ``sqrsum = sum_k r^2``, FP32.

Cube path (``cube_accepts``: K a multiple of 16): a TF32 value of magnitude at least 2^-123 is the exact
sum of two BF16 halves (``split_tf32``: 8 + 3 significant bits; below that the low half's last bit falls
under BF16's smallest subnormal step and rounds, and the tiniest values may lose it, so the product is
no longer exact there: mHC weights are nowhere near that range, and the callers pass ``tf32_operand(fn)``
(an arbitrary FP32 ``fn`` would lose its low 13 bits)), so ``mul = r @ hi.T + r @ lo.T`` with every product exact
and both GEMMs accumulated in one FP32 L0C tile; only the summation order differs from the reference's
GEMM (upstream compares the normalised result at 1e-3). A cube core owns 32 tokens and walks K in
256-column L1 tiles, then the K tail in 16-column ones (no padding in K, so nothing stale enters a sum);
L0C leaves in whole 32-row tiles (into an output padded to them, of which the caller keeps ``t`` rows) and
its columns past ``m3`` are never copied out, so stale L1 rows never reach a result.
The halves are both nonzero and of ``fn``'s sign wherever ``fn`` is (down to the same 2^-123: ``hi`` is
truncated, and where the low half would be 0 one unit moves from ``hi`` to ``lo``), so an infinite residual gives the reference's
+-Inf rather than ``Inf * 0 = NaN``; NaN propagates as in torch. The square sum stays on the vector cores
(``build_sqrsum``: SIMT, compensated), a second pass over ``r``; the split is a few element-wise
device ops on ``fn`` per call.

Vector path (the fallback for other K): a core owns a tile of tokens and walks K in tiles, staging ``r``
and ``fn`` in UB; one SIMT thread per output (``m3`` dot products and the square sum per token)
accumulates its tile's columns in order with a compensated (Kahan) sum carried across the tiles (K =
28672 at DeepSeek's shape: a plain running sum would drift past the reference's GEMM).

Token counts and K are symbolic in every kernel: one lowering per ``m3``.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from .mhc_mix import MAX_STREAMS, compensated_sum

K_TILE = 256
TOKENS = 8  # tokens a core owns (vector path)
SQ_TOKENS = 8  # tokens a core owns (square sums): few, so that decode spreads over the vector cores


@functools.cache
def build(m3: int):
    import tilelang.ascend.language as T

    t, k, tm3 = T.dynamic("t"), T.dynamic("k"), T.dynamic("tm3")
    kc, br = K_TILE, TOKENS
    outs = br * (m3 + 1)  # m3 dot products and the square sum of each token
    k_sum = compensated_sum(T)

    @T.prim_func
    def mhc_projection(R: T.Tensor((t, k), "bfloat16"), Fn: T.Tensor((m3, k), "float32"),
                       Mul: T.Tensor((tm3,), "float32"), Sq: T.Tensor((t,), "float32")):
        with T.Kernel(T.ceildiv(t, br)) as bid:
            r = T.alloc_shared((br, kc), "bfloat16")
            fn = T.alloc_shared((m3, kc), "float32")
            mul = T.alloc_shared((br * m3 + 8,), "float32")
            sq = T.alloc_shared((br + 8,), "float32")
            emul = T.alloc_shared((br * m3 + 8,), "float32")  # the sums' carried rounding errors
            esq = T.alloc_shared((br + 8,), "float32")
            r0 = bid * br
            rows = T.min(br, t - r0)
            with T.SimtVF(threads=outs):
                for o in T.Parallel(outs):
                    if o < br * m3:
                        mul[o] = 0.0
                        emul[o] = 0.0
                    else:
                        sq[o - br * m3] = 0.0
                        esq[o - br * m3] = 0.0
            for ki in T.serial(T.ceildiv(k, kc)):
                k0 = ki * kc
                cols = T.min(kc, k - k0)
                T.copy(R[r0:r0 + rows, k0:k0 + cols], r[0:rows, 0:cols])
                T.copy(Fn[0:m3, k0:k0 + cols], fn[0:m3, 0:cols])
                with T.SimtVF(threads=outs):
                    for o in T.Parallel(outs):
                        if o < br * m3:
                            k_sum(cols, lambda c, o=o: T.Cast("float32", r[o // m3, c]) * fn[o % m3, c], mul, emul, o)
                        else:
                            k_sum(cols, lambda c, o=o: T.Cast("float32", r[o - br * m3, c]) * T.Cast("float32",
                                  r[o - br * m3, c]), sq, esq, o - br * m3)
            T.copy(mul[0:rows * m3], Mul[r0 * m3:r0 * m3 + rows * m3])
            T.copy(sq[0:rows], Sq[r0:r0 + rows])

    return mhc_projection



CUBE_TOKENS = 32  # tokens a cube core owns
CUBE_K_TILE = 256
CUBE_K_TAIL = 16  # the K tail's tile: one fractal wide


@functools.cache
def build_cube(m3: int):
    """``Mul[:t] (tp, m3) = R @ Hi.T + R @ Lo.T`` on the cube cores, FP32 accumulation in L0C; ``tp`` is ``t``
    rounded up to whole tiles (the rows past ``t`` get the stale rows of the last tile)."""
    import tilelang.ascend.language as T

    t, k, tp = T.dynamic("t"), T.dynamic("k"), T.dynamic("tp")
    bm, bk, bt = CUBE_TOKENS, CUBE_K_TILE, CUBE_K_TAIL
    nm = -(-m3 // 16) * 16  # fn's rows padded to a fractal

    @T.prim_func
    def mhc_projection_cube(R: T.Tensor((t, k), "bfloat16"), Hi: T.Tensor((m3, k), "bfloat16"),
                            Lo: T.Tensor((m3, k), "bfloat16"), Mul: T.Tensor((tp, m3), "float32")):
        with T.Kernel(T.ceildiv(t, bm)) as bid:
            r = T.alloc_l1((bm, bk), "bfloat16")
            hi = T.alloc_l1((nm, bk), "bfloat16")
            lo = T.alloc_l1((nm, bk), "bfloat16")
            r_tail = T.alloc_l1((bm, bt), "bfloat16")
            hi_tail = T.alloc_l1((nm, bt), "bfloat16")
            lo_tail = T.alloc_l1((nm, bt), "bfloat16")
            acc = T.alloc_l0c((bm, nm), "float32")
            r0 = bid * bm
            rows = T.min(bm, t - r0)
            full = k // bk
            for ki in T.serial(full):
                T.copy(R[r0:r0 + rows, ki * bk:ki * bk + bk], r[0:rows, :])
                T.copy(Hi[0:m3, ki * bk:ki * bk + bk], hi[0:m3, :])
                T.copy(Lo[0:m3, ki * bk:ki * bk + bk], lo[0:m3, :])
                T.gemm(r, hi, acc, transpose_B=True, clear_accum=(ki == 0))
                T.gemm(r, lo, acc, transpose_B=True)
            for ti in T.serial((k - full * bk) // bt):
                k0 = full * bk + ti * bt
                T.copy(R[r0:r0 + rows, k0:k0 + bt], r_tail[0:rows, :])
                T.copy(Hi[0:m3, k0:k0 + bt], hi_tail[0:m3, :])
                T.copy(Lo[0:m3, k0:k0 + bt], lo_tail[0:m3, :])
                T.gemm(r_tail, hi_tail, acc, transpose_B=True, clear_accum=(full + ti == 0))
                T.gemm(r_tail, lo_tail, acc, transpose_B=True)
            # whole tiles out: TileLang 0.1.15 strides L0C by the copied rows, not the tile's (Mul has tp rows)
            T.copy(acc[0:bm, 0:m3], Mul[r0:r0 + bm, 0:m3])

    return mhc_projection_cube


@functools.cache
def build_sqrsum():
    """``Sq (t,) = sum_k R^2`` on the vector cores: one SIMT thread per token, compensated across K tiles."""
    import tilelang.ascend.language as T

    t, k = T.dynamic("t"), T.dynamic("k")
    kc, br = K_TILE, SQ_TOKENS
    k_sum = compensated_sum(T)

    @T.prim_func
    def mhc_sqrsum(R: T.Tensor((t, k), "bfloat16"), Sq: T.Tensor((t,), "float32")):
        with T.Kernel(T.ceildiv(t, br)) as bid:
            r = T.alloc_shared((br, kc), "bfloat16")
            sq = T.alloc_shared((br + 8,), "float32")
            esq = T.alloc_shared((br + 8,), "float32")
            r0 = bid * br
            rows = T.min(br, t - r0)
            with T.SimtVF(threads=br):
                for o in T.Parallel(br):
                    sq[o] = 0.0
                    esq[o] = 0.0
            for ki in T.serial(T.ceildiv(k, kc)):
                k0 = ki * kc
                cols = T.min(kc, k - k0)
                T.copy(R[r0:r0 + rows, k0:k0 + cols], r[0:rows, 0:cols])
                with T.SimtVF(threads=br):
                    for o in T.Parallel(br):
                        k_sum(cols, lambda c, o=o: T.Cast("float32", r[o, c]) * T.Cast("float32", r[o, c]), sq, esq, o)
            T.copy(sq[0:rows], Sq[r0:r0 + rows])

    return mhc_sqrsum


def split_tf32(fn):
    """``(hi, lo)`` BF16 with ``hi + lo == fn`` exactly for TF32 ``fn`` with ``|fn| >= 2^-123`` (the module
    docstring says what happens below): ``hi`` truncated toward zero (so ``lo``
    has ``fn``'s sign), and where that leaves ``lo = 0`` one unit of ``hi``'s last place moves to ``lo``;
    non-finite ``fn`` in both halves (``r * Inf`` twice gives the reference's product)."""
    import torch

    bits = fn.contiguous().view(torch.int32)
    hi_bits = bits & -(1 << 16)
    exact = (bits == hi_bits) & (hi_bits & 0x7FFF0000 > 0x10000)  # hi would carry it all, and can give a unit
    hi = torch.where(exact, hi_bits - (1 << 16), hi_bits).view(torch.float32)
    finite = torch.isfinite(fn)
    lo = torch.where(finite, fn - hi, fn)
    hi = torch.where(finite, hi, fn)
    return hi.bfloat16(), lo.bfloat16()


def _cube(x2, fn, sqrsum):
    """``mul (t, m3)``, a view of whole cube tiles' rows, and the square sums into ``sqrsum``."""
    import torch

    from .._lib import LIB

    t, m3 = x2.shape[0], fn.shape[0]
    hi, lo = split_tf32(fn)
    tiles = torch.empty(-(-t // CUBE_TOKENS) * CUBE_TOKENS, m3, dtype=torch.float32, device=x2.device)
    LIB.run_tilelang(build_cube, (m3,), x2, hi, lo, tiles)
    LIB.run_tilelang(build_sqrsum, (), x2, sqrsum)
    return tiles[:t]


def projection(x, fn):
    """``(mul (..., m3), sqrsum (..., 1))`` of the flattened residual ``x (..., m, H)`` onto ``fn (m3, m * H)``."""
    import torch

    from .._lib import LIB

    m3, k = fn.shape
    outer = x.shape[:-2]
    sqrsum = torch.zeros(*outer, 1, dtype=torch.float32, device=x.device)
    t = sqrsum.numel()
    if t and k and cube_accepts(x, fn):
        return _cube(x.contiguous().view(t, k), fn, sqrsum.view(-1)).view(*outer, m3), sqrsum
    mul = torch.zeros(*outer, m3, dtype=torch.float32, device=x.device)
    if t and k:  # K = 0: empty sums stay 0
        LIB.run_tilelang(build, (m3,), x.contiguous().view(t, k), fn.contiguous(), mul.view(-1), sqrsum.view(-1))
    return mul, sqrsum


MAX_MIXES = MAX_STREAMS * (MAX_STREAMS + 2)  # fn's rows staged in UB


def accepts(x, fn) -> bool:
    return 1 <= fn.shape[0] <= MAX_MIXES


def cube_accepts(x, fn) -> bool:
    """The cube path: K in whole fractals (16 columns)."""
    return fn.shape[1] % CUBE_K_TAIL == 0 and accepts(x, fn)
