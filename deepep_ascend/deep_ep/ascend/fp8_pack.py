"""Packing BF16 tokens by destination rank with the per-token FP8 cast fused (TileLang Ascend dialect,
vector cores, SIMT): the cast of ``deep_ep.utils.math.per_token_cast_to_fp8`` (128-channel blocks,
``scale = max(amax, 1e-4) / 448``, rounded up to a power of two through its bits with ``round_scale``,
E4M3 = RNE cast of ``x / scale``), each cast row and its FP32 scales written to every position of
the token (``0 <= pos[t, j] < out_rows``; others skipped). With the identity positions it is the
plain cast.

A core casts a tile of rows in UB in two SIMT passes (block amax and scale, then the quotients) and
writes each row out with one DMA per position. The row counts (``t``, ``out_rows``) are symbolic
(``T.dynamic``): one kernel per hidden size, position count and scale rounding serves every batch.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from deepjit.tilelang_route.ub import padded

BLOCK = 128
FP8_MAX = 448.0
SCALE_MIN = 1e-4
UB_TILE_BYTES = 48 * 1024


@functools.cache
def build(h: int, p: int, round_scale: bool):
    import tilelang.ascend.language as T

    nb = h // BLOCK
    br = max(1, min(16, UB_TILE_BYTES // (h * 3)))
    t, out_rows = T.dynamic("t"), T.dynamic("out_rows")

    @T.prim_func
    def pack_fp8(X: T.Tensor((t, h), "bfloat16"), Pos: T.Tensor((t, p), "int32"),
                 Q: T.Tensor((out_rows, h), "float8_e4m3fn"), S: T.Tensor((out_rows, nb), "float32")):
        with T.Kernel(T.ceildiv(t, br)) as bid:
            x = T.alloc_shared((br, h), "bfloat16")
            q = T.alloc_shared((br, h), "float8_e4m3fn")
            sf = T.alloc_shared((br, padded(nb, 4)), "float32")
            pos = T.alloc_shared((br, padded(p, 4)), "int32")
            r0 = bid * br
            rows = T.min(br, t - r0)
            T.copy(X[r0:r0 + rows, :], x[0:rows, :])
            T.copy(Pos[r0:r0 + rows, :], pos[0:rows, 0:p])
            with T.SimtVF(threads=min(256, br * nb)):
                for r, b in T.Parallel(br, nb):
                    amax = T.alloc_var("float32")
                    amax = SCALE_MIN
                    for j in T.serial(BLOCK):
                        amax = T.max(amax, T.abs(T.Cast("float32", x[r, b * BLOCK + j])))
                    s = T.alloc_var("float32")
                    s = amax / FP8_MAX
                    if round_scale:
                        s = T.reinterpret(T.bitwise_and(T.reinterpret(s, "int32") + 0x7FFFFF, 0x7F800000), "float32")
                    sf[r, b] = s
            with T.SimtVF(threads=min(256, br * nb)):
                for r, b in T.Parallel(br, nb):
                    for j in T.serial(BLOCK):
                        v = T.Cast("float32", x[r, b * BLOCK + j]) / sf[r, b]
                        q[r, b * BLOCK + j] = T.Cast("float8_e4m3fn", T.min(T.max(v, -FP8_MAX), FP8_MAX))
            for r in T.serial(rows):
                for j in T.serial(p):
                    dst = pos[r, j]
                    if dst >= 0:
                        if dst < out_rows:  # never write outside Q / S, whatever the positions say
                            T.copy(q[r, :], Q[dst, :])
                            T.copy(sf[r, 0:nb], S[dst, :])

    return pack_fp8


def pack_fp8(x, pos, out, scales, round_scale: bool) -> None:
    """Casts BF16 ``x [T, H]`` (``H % 128 == 0``) and writes row ``t`` to ``out`` / ``scales`` rows
    ``pos[t, j]`` (int32 ``[T, p]``, -1 = none)."""
    from .._lib import LIB

    t, h = x.shape
    if t == 0 or pos.shape[1] == 0 or out.shape[0] == 0:
        return
    LIB.run_tilelang(build, (h, pos.shape[1], bool(round_scale)), x.contiguous(), pos.contiguous(), out, scales)


def per_token_cast_to_fp8(x, round_scale: bool):
    """``deep_ep.utils.math.per_token_cast_to_fp8`` on Ascend: ``(E4M3 [T, H], FP32 scales [T, H / 128])``."""
    import torch

    t, h = x.shape
    out = torch.empty(t, h, dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty(t, h // BLOCK, dtype=torch.float32, device=x.device)
    pack_fp8(x, torch.arange(t, dtype=torch.int32, device=x.device)[:, None], out, scales, round_scale)
    return out, scales
