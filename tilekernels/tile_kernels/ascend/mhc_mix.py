"""The per-token mHC mix maths on Ascend (TileLang Ascend dialect, vector cores, SIMT): serves
``mhc_head_compute_mix``, ``mhc_pre_split_mixes`` and the RMS step of ``mhc_pre_norm_fn`` (table op
``mhc_norm``).

Each kernel sees its tensors flattened to rows of a few FP32 values; a core stages a tile of rows in UB
and runs one SIMT pass over its elements, as the references compute them (FP32, one rounding per
operation, in the references' order):
- head mix: ``sigmoid(x * scale + base) + pre_eps``, sigmoid as ``1 / (1 + exp(-z))``
- split mixes: ``z = x * scale[part] + base``; pre = ``sigmoid(z) + pre_eps``, post =
  ``sigmoid(z) * post_mult``, comb = ``z``
- norm: ``mul * (1 / sqrt(sqrsum / k + eps))`` (torch's CPU rsqrt is that division)
Scalars (eps, k, post_mult) travel as a small FP32 tensor (the FP32 values torch's scalar ops use), so
one lowering per mix width serves every setting; the row count is symbolic. NaN and +-Inf propagate
through the arithmetic as in torch (no max or compare is involved).

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations.
"""
import functools

TILE = 2048  # FP32 elements a core stages per tile (rows of the mix, whole rows only)
THREADS = 256
# The mHC kernels serve up to 8 residual streams (DeepSeek uses 4): their UB tiles are sized for that;
# wider mixes go to the reference (each op's ``supports`` says so).
MAX_STREAMS = 8
STREAMS = f"1 to {MAX_STREAMS} residual streams"


def serves_streams(m: int) -> bool:
    return 1 <= m <= MAX_STREAMS


def scalars(device, *values):
    """The FP32 values of Python scalars as a device tensor, written by device fills (no host-to-device copy
    of a host buffer, so the call can be captured in a graph)."""
    import torch

    out = torch.empty(len(values), dtype=torch.float32, device=device)
    for i, v in enumerate(values):
        out[i:i + 1].fill_(v)
    return out


def compensated_sum(T):
    """The macro ``compensated_sum(n, term, acc, err, k)``: ``acc[k] += sum_{c < n} term(c)`` in FP32 with the
    rounding error carried in ``err[k]`` (Kahan), so a long width sum stays within a few units of the exact
    one whatever its length (the references' GEMM / pairwise sums are that close). An infinite partial sum
    carries no error term (inf - inf would make it NaN), so +-Inf and NaN come out as in a plain sum."""

    @T.macro
    def compensated_sum(n, term, acc, err, k):
        s = T.alloc_var("float32")
        e = T.alloc_var("float32")
        y = T.alloc_var("float32")
        u = T.alloc_var("float32")
        s = acc[k]
        e = err[k]
        for c in T.serial(n):
            y = term(c) - e
            u = s + y
            e = T.if_then_else(T.isinf(u), T.float32(0.0), (u - s) - y)
            s = u
        acc[k] = s
        err[k] = e

    return compensated_sum


def _rows_per_tile(width: int) -> int:
    return max(1, TILE // width)


def sigmoid(T, z):
    return 1.0 / (1.0 + T.exp(-z))


@functools.cache
def build_head_mix(m: int):
    import tilelang.ascend.language as T

    br = _rows_per_tile(m)
    nx = T.dynamic("nx")  # t * m

    @T.prim_func
    def mhc_head_mix(X: T.Tensor((nx,), "float32"), S: T.Tensor((1,), "float32"), B: T.Tensor((m,), "float32"),
                     P: T.Tensor((1,), "float32"), Out: T.Tensor((nx,), "float32")):
        with T.Kernel(T.ceildiv(nx, br * m)) as bid:
            x = T.alloc_shared((br * m,), "float32")
            base = T.alloc_shared((m + 8,), "float32")
            sp = T.alloc_shared((16,), "float32")  # scale, pre_eps: each at the start of its own 32-byte block
            r0 = bid * br
            n = T.min(br, nx // m - r0) * m
            T.copy(X[r0 * m:r0 * m + n], x[0:n])
            T.copy(B, base[0:m])
            T.copy(S, sp[0:1])
            T.copy(P, sp[8:9])
            with T.SimtVF(threads=THREADS):
                for i in T.Parallel(br * m):
                    if i < n:
                        x[i] = sigmoid(T, x[i] * sp[0] + base[i % m]) + sp[8]
            T.copy(x[0:n], Out[r0 * m:r0 * m + n])

    return mhc_head_mix


def head_mix_accepts(input_mix, *_) -> bool:
    return serves_streams(input_mix.shape[-1])


def head_mix(input_mix, scale, base, pre_eps):
    """``sigmoid(input_mix * scale + base) + pre_eps`` over ``(..., m)`` FP32 mixes."""
    import torch

    from .._lib import LIB

    m = input_mix.shape[-1]
    out = torch.empty(input_mix.shape, dtype=torch.float32, device=input_mix.device)
    if out.numel():
        eps = scalars(input_mix.device, pre_eps)
        LIB.run_tilelang(build_head_mix, (m,), input_mix.contiguous().view(-1), scale.contiguous(), base.contiguous(),
                       eps, out.view(-1))
    return out


@functools.cache
def build_split_mixes(m: int):
    import tilelang.ascend.language as T

    m3 = m * (m + 2)
    br = _rows_per_tile(m3)
    nx, npre, ncomb = T.dynamic("nx"), T.dynamic("npre"), T.dynamic("ncomb")  # t * (m3, m, m * m)

    @T.prim_func
    def mhc_split_mixes(X: T.Tensor((nx,), "float32"), S: T.Tensor((3,), "float32"),
                        B: T.Tensor((m3,), "float32"), P: T.Tensor((2,), "float32"),
                        Pre: T.Tensor((npre,), "float32"), Post: T.Tensor((npre,), "float32"),
                        Comb: T.Tensor((ncomb,), "float32")):
        with T.Kernel(T.ceildiv(nx, br * m3)) as bid:
            x = T.alloc_shared((br * m3,), "float32")
            pre = T.alloc_shared((br * m + 8,), "float32")
            post = T.alloc_shared((br * m + 8,), "float32")
            comb = T.alloc_shared((br * m * m + 8,), "float32")
            base = T.alloc_shared((m3 + 8,), "float32")
            sp = T.alloc_shared((16,), "float32")  # scale[0..2], post_mult, pre_eps
            r0 = bid * br
            rows = T.min(br, nx // m3 - r0)
            T.copy(X[r0 * m3:r0 * m3 + rows * m3], x[0:rows * m3])
            T.copy(B, base[0:m3])
            T.copy(S, sp[0:3])
            T.copy(P, sp[8:10])
            with T.SimtVF(threads=THREADS):
                for i in T.Parallel(br * m3):
                    if i < rows * m3:
                        r = i // m3
                        j = i % m3
                        if j < m:
                            pre[r * m + j] = sigmoid(T, x[i] * sp[0] + base[j]) + sp[9]
                        elif j < 2 * m:
                            post[r * m + j - m] = sigmoid(T, x[i] * sp[1] + base[j]) * sp[8]
                        else:
                            comb[r * m * m + j - 2 * m] = x[i] * sp[2] + base[j]
            T.copy(pre[0:rows * m], Pre[r0 * m:r0 * m + rows * m])
            T.copy(post[0:rows * m], Post[r0 * m:r0 * m + rows * m])
            T.copy(comb[0:rows * m * m], Comb[r0 * m * m:r0 * m * m + rows * m * m])

    return mhc_split_mixes


def split_mixes_accepts(mixes, scale, base, m, *_) -> bool:
    return serves_streams(m)


def split_mixes(mixes, scale, base, m, post_mult, pre_eps):
    """``(n0, n1, m(m+2))`` mixes -> pre ``(n0, n1, m, 1)``, post ``(n0, n1, m, 1)``, comb ``(n0, n1, m, m)``."""
    import torch

    from .._lib import LIB

    n0, n1 = mixes.shape[:2]
    dev = mixes.device
    pre, post = (torch.empty(n0, n1, m, 1, device=dev), torch.empty(n0, n1, m, 1, device=dev))
    comb = torch.empty(n0, n1, m, m, device=dev)
    if n0 * n1:
        params = scalars(dev, post_mult, pre_eps)
        LIB.run_tilelang(build_split_mixes, (m,), mixes.contiguous().view(-1), scale.contiguous(), base.contiguous(),
                       params, pre.view(-1), post.view(-1), comb.view(-1))
    return pre, post, comb


@functools.cache
def build_norm(m3: int):
    import tilelang.ascend.language as T

    br = _rows_per_tile(m3)
    nx, t = T.dynamic("nx"), T.dynamic("t")  # t * m3, t

    @T.prim_func
    def mhc_norm(Mul: T.Tensor((nx,), "float32"), Sq: T.Tensor((t,), "float32"), P: T.Tensor((2,), "float32"),
                 Out: T.Tensor((nx,), "float32")):
        with T.Kernel(T.ceildiv(t, br)) as bid:
            x = T.alloc_shared((br * m3,), "float32")
            sq = T.alloc_shared((br + 8,), "float32")
            sp = T.alloc_shared((8,), "float32")  # k, eps
            r0 = bid * br
            rows = T.min(br, t - r0)
            T.copy(Mul[r0 * m3:r0 * m3 + rows * m3], x[0:rows * m3])
            T.copy(Sq[r0:r0 + rows], sq[0:rows])
            T.copy(P, sp[0:2])
            with T.SimtVF(threads=min(br, THREADS)):
                for r in T.Parallel(br):  # a thread per row: the row's factor once
                    if r < rows:
                        f = 1.0 / T.sqrt(sq[r] / sp[0] + sp[1])
                        for j in T.serial(m3):
                            x[r * m3 + j] = x[r * m3 + j] * f
            T.copy(x[0:rows * m3], Out[r0 * m3:r0 * m3 + rows * m3])

    return mhc_norm


def norm_accepts(mul, *_) -> bool:
    return mul.shape[-1] <= TILE


def norm(mul, sqrsum, k, eps):
    """``mul * rsqrt(sqrsum / k + eps)``: ``mul (..., m3)``, ``sqrsum (..., 1)`` FP32."""
    import torch

    from .._lib import LIB

    m3 = mul.shape[-1]
    out = torch.empty(mul.shape, dtype=torch.float32, device=mul.device)
    if out.numel():
        params = scalars(mul.device, k, eps)
        LIB.run_tilelang(build_norm, (m3,), mul.contiguous().view(-1), sqrsum.contiguous().view(-1), params,
                       out.view(-1))
    return out
