"""``tile_kernels.quant.per_channel_cast_fused`` on Ascend (TileLang Ascend dialect, vector cores): the
reference's steps, each an Ascend kernel.

1. With ``pos_to_token``: a row gather, ``row p = x[pos_to_token[p]]``, zero where -1 (data and, for a
   ``(data, sf)`` input, its FP32 scale rows), by ``build_gather``: a core owns a tile of output rows and
   moves them through UB (every row's DMA in, then every row's DMA out); the -1 rows keep the zeroed output's zeros, and
   so do entries outside ``[0, n_src)`` (device values are not validated on the host: graph capture).
   Rows move as bytes, so every bit is kept; sizes are symbolic (one lowering serves every shape and dtype).
2. A ``(data, sf)`` E4M3 input: the Ascend cast-back to FP32 with its ``(1, num_per_channels)`` blocks.
3. The Ascend block cast with ``(num_per_tokens, 1)`` blocks (E4M3, row-major FP32 scales, ``round_sf``).

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

ROWS, COL_BYTES = 16, 4096  # a gather tile: output rows x bytes of each


@functools.cache
def build_gather():
    import tilelang.ascend.language as T

    n_src, n_out, width = T.dynamic("n_src"), T.dynamic("n_out"), T.dynamic("width")

    @T.prim_func
    def gather_rows(X: T.Tensor((n_src, width), "uint8"), Pos: T.Tensor((n_out,), "int32"),
                    Out: T.Tensor((n_out, width), "uint8")):
        with T.Kernel(T.ceildiv(n_out, ROWS) * T.ceildiv(width, COL_BYTES)) as bid:
            buf = T.alloc_shared((ROWS, COL_BYTES), "uint8")
            pos = T.alloc_shared((32,), "int32")
            r0 = (bid // T.ceildiv(width, COL_BYTES)) * ROWS
            c0 = (bid % T.ceildiv(width, COL_BYTES)) * COL_BYTES
            rows = T.min(ROWS, n_out - r0)
            cols = T.min(COL_BYTES, width - c0)
            T.copy(Pos[r0:r0 + rows], pos[0:rows])
            # All loads, then all stores: one MTE2 -> MTE3 flag a tile. A load-store pair a row would set
            # that flag once a row with nothing holding MTE2 back, and a second set before MTE3's wait is
            # illegal (asc_sync_notify); the timeline saw MTE2 run ahead at 4096 x 7168.
            for r in T.serial(rows):
                p = pos[r]
                if T.And(p >= 0, p < n_src):  # -1 and unvalidated out-of-range entries: a zero row
                    T.copy(X[p, c0:c0 + cols], buf[r, 0:cols])
            for r in T.serial(rows):
                p = pos[r]
                if T.And(p >= 0, p < n_src):
                    T.copy(buf[r, 0:cols], Out[r0 + r, c0:c0 + cols])

    return gather_rows


def gather_rows(x, pos_to_token):
    """``out[p] = x[pos_to_token[p]]`` (zero rows for -1 and out-of-range entries), any dtype."""
    import torch

    from .._lib import LIB

    n_out = pos_to_token.shape[0]
    out = torch.zeros((n_out, *x.shape[1:]), dtype=x.dtype, device=x.device)
    width = x[0].numel() * x.element_size() if x.shape[0] else 0
    if n_out and width:  # no source rows: every row stays zero
        LIB.run_tilelang(build_gather, (), x.contiguous().view(torch.uint8).reshape(x.shape[0], width),
                       pos_to_token.contiguous(), out.view(torch.uint8).reshape(n_out, width))
    return out


def per_channel_cast_fused(x, num_per_tokens, num_per_channels, round_sf, pos_to_token):
    """``(q E4M3 (P, H), sf FP32 (ceil(P / num_per_tokens), H))``, as ``reference/cast.per_channel_cast_fused``."""
    from . import block_cast, cast_back

    is_quant = isinstance(x, (tuple, list))
    data, sf_in = x if is_quant else (x, None)
    if pos_to_token is not None:
        data = gather_rows(data, pos_to_token)
        if is_quant:
            sf_in = gather_rows(sf_in, pos_to_token)
    if is_quant:
        data = cast_back.cast_back((data, sf_in), "fp32", (1, num_per_channels))
    return block_cast.cast(data, "e4m3", (num_per_tokens, 1), False, round_sf, False)
