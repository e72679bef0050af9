"""The combine reduction on Ascend (TileLang Ascend dialect, vector cores, SIMT): per token, in
column order of ``pos``, ``acc = acc + w * rows[pos[t, j]]`` in FP32 (``w`` only when weighted;
``pos`` outside ``[0, num_rows)`` skipped), then one rounding to BF16.

``acc`` starts from the biases (``b0`` then ``+ b1``, in FP32), from 0, or (``from_first``) from the
first term itself, as upstream's order needs: the caller lists each receiving rank's partial at the
token's last top-k slot (deep_ep/utils/refs.py), and a rank's partial of its local slots starts from
its first slot's row. A core owns a token tile and a column tile; each token's rows are gathered
into UB by DMA, then one SIMT pass accumulates them. The row counts (``num_rows``, ``t``) are symbolic
(``T.dynamic``): one kernel per hidden size, position count and flags serves every batch.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

from deepjit.tilelang_route.ub import padded

UB_TILE_BYTES = 64 * 1024


@functools.cache
def build(h: int, p: int, weighted: bool, num_bias: int, from_first: bool):
    import tilelang.ascend.language as T

    br = 4
    hc = min(h, max(16, UB_TILE_BYTES // (2 * (p + 3 * br)) // 16 * 16))  # p gathered rows, b0, b1, out
    hcp = padded(hc, 2)  # UB rows start 32-byte aligned
    nc = -(-h // hc)
    num_rows, t = T.dynamic("num_rows"), T.dynamic("t")
    b0_rows, b1_rows = (t if num_bias >= 1 else 1), (t if num_bias >= 2 else 1)  # an absent bias is one dummy row

    @T.prim_func
    def combine_reduce(X: T.Tensor((num_rows, h), "bfloat16"), Pos: T.Tensor((t, p), "int32"),
                       W: T.Tensor((t, p), "float32"), B0: T.Tensor((b0_rows, h), "bfloat16"),
                       B1: T.Tensor((b1_rows, h), "bfloat16"), Out: T.Tensor((t, h), "bfloat16")):
        with T.Kernel(T.ceildiv(t, br) * nc) as bid:
            xs = T.alloc_shared((p, hcp), "bfloat16")
            pos = T.alloc_shared((br, padded(p, 4)), "int32")
            w = T.alloc_shared((br, padded(p, 4)), "float32")
            b0 = T.alloc_shared((br, hcp), "bfloat16")
            b1 = T.alloc_shared((br, hcp), "bfloat16")
            out = T.alloc_shared((br, hcp), "bfloat16")
            r0 = (bid // nc) * br
            c0 = (bid % nc) * hc
            rows = T.min(br, t - r0)
            cols = T.min(hc, h - c0)
            T.copy(Pos[r0:r0 + rows, :], pos[0:rows, 0:p])
            if weighted:
                T.copy(W[r0:r0 + rows, :], w[0:rows, 0:p])
            if num_bias >= 1:
                T.copy(B0[r0:r0 + rows, c0:c0 + cols], b0[0:rows, 0:cols])
            if num_bias >= 2:
                T.copy(B1[r0:r0 + rows, c0:c0 + cols], b1[0:rows, 0:cols])
            for r in T.serial(rows):
                for j in T.serial(p):
                    src = pos[r, j]
                    if src >= 0:
                        if src < num_rows:  # positions come from peers' metadata: never read outside X
                            T.copy(X[src, c0:c0 + cols], xs[j, 0:cols])
                with T.SimtVF(threads=min(hc, 256)):
                    for c in T.Parallel(hc):
                        acc = T.alloc_var("float32")
                        started = T.alloc_var("int32")
                        acc = 0.0
                        started = 0 if from_first and num_bias == 0 else 1
                        if num_bias >= 1:
                            acc = T.Cast("float32", b0[r, c])
                        if num_bias >= 2:
                            acc = acc + T.Cast("float32", b1[r, c])
                        for j in T.serial(p):
                            if pos[r, j] >= 0:
                                if pos[r, j] < num_rows:
                                    term = T.alloc_var("float32")
                                    term = T.Cast("float32", xs[j, c])
                                    if weighted:
                                        term = w[r, j] * term
                                    if started == 1:
                                        acc = acc + term
                                    else:
                                        acc = term
                                        started = 1
                        out[r, c] = T.Cast("bfloat16", acc)
            T.copy(out[0:rows, 0:cols], Out[r0:r0 + rows, c0:c0 + cols])

    return combine_reduce


def combine_reduce(rows, pos, weights=None, bias=(), from_first: bool = False, out=None):
    """BF16 ``[T, H]``: ``bias[0] (+ bias[1])`` (or 0, or the first term with ``from_first``) plus
    ``weights[t, j] * rows[pos[t, j]]`` (unweighted without ``weights``) over ``j`` in order."""
    import torch

    from .._lib import LIB

    t, p = pos.shape
    h = rows.shape[1]
    out = torch.empty(t, h, dtype=torch.bfloat16, device=rows.device) if out is None else out
    if t == 0 or h == 0:
        return out
    if p == 0 or rows.shape[0] == 0:  # nothing received: only the biases (or zeros)
        pos = torch.full((t, 1), -1, dtype=torch.int32, device=rows.device)
        rows, p = torch.zeros(1, h, dtype=torch.bfloat16, device=rows.device), 1
        weights = None
    dummy = torch.zeros(1, h, dtype=torch.bfloat16, device=rows.device)
    b0 = bias[0].contiguous() if len(bias) > 0 else dummy
    b1 = bias[1].contiguous() if len(bias) > 1 else dummy
    w = weights.float().contiguous() if weights is not None else torch.zeros(t, p, dtype=torch.float32, device=rows.device)
    LIB.run_tilelang(build, (h, p, weights is not None, len(bias), bool(from_first)), rows.contiguous(), pos.contiguous(), w,
           b0, b1, out)
    return out
