"""SIMD (register) kernels: vector loads/stores with their distribution modes, vcvt with parts and
packing stores, arithmetic with a runtime tail mask, compare/select, integer logic, and the
reductions TileLang lowers to vcmax/vcadd inside SimdVF.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations."""
import torch

from .case import Case
from .data import randint, randn, sentinel, special_f32
from .simt_casts import to_fp8_saturating, to_saturating

VL32 = 64  # float32 lanes in one 256-byte vector register


def simd_cast_f32_to_bf16(n=256):
    """vcvt f32 -> bf16 into the even 16-bit halves (PART_EVEN), vsts PK_B32 packs them densely."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simd_cast_f32_to_bf16(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "bfloat16")):
        with T.Kernel(1):
            a = T.alloc_shared((n,), "float32")
            b = T.alloc_shared((n,), "bfloat16")
            T.copy(A, a)
            with T.SimdVF():
                for i in T.serial(n // VL32):
                    v = T.simd.vld(a[i * VL32])
                    w = T.simd.vcvt(v, "bfloat16", part=0)
                    T.simd.vsts(b[i * VL32], w, dist="PK_B32")
            T.copy(b, B)

    return simd_cast_f32_to_bf16


def simd_cast_f32_to_fp8(n=256):
    """vcvt f32 -> fp8 E4M3 (saturating, PART_P0), vsts PK4_B32 keeps one byte of every 32-bit lane."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simd_cast_f32_to_fp8(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float8_e4m3fn")):
        with T.Kernel(1):
            a = T.alloc_shared((n,), "float32")
            b = T.alloc_shared((n,), "float8_e4m3fn")
            T.copy(A, a)
            with T.SimdVF():
                for i in T.serial(n // VL32):
                    v = T.simd.vld(a[i * VL32])
                    w = T.simd.vcvt(v, "float8_e4m3fn", part=0)
                    T.simd.vsts(b[i * VL32], w, dist="PK4_B32")
            T.copy(b, B)

    return simd_cast_f32_to_fp8


def simd_cast_bf16_to_f32(n=256):
    """vld UNPK_B16 spreads 64 bf16 over the even halves; vcvt PART_EVEN widens them to f32."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simd_cast_bf16_to_f32(A: T.Tensor((n,), "bfloat16"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            a = T.alloc_shared((n,), "bfloat16")
            b = T.alloc_shared((n,), "float32")
            T.copy(A, a)
            with T.SimdVF():
                for i in T.serial(n // VL32):
                    v = T.simd.vld(a[i * VL32], dist="UNPK_B16")
                    w = T.simd.vcvt(v, "float32", part=0)
                    T.simd.vsts(b[i * VL32], w)
            T.copy(b, B)

    return simd_cast_bf16_to_f32


def simd_arith_tail(n=200):
    """c = max(a + b, 0.5 a) * 3 over 200 lanes: the last register runs under update_mask(8)."""
    import tilelang.ascend.language as T
    steps = (n + VL32 - 1) // VL32

    @T.prim_func
    def simd_arith_tail(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            a = T.alloc_shared((steps * VL32,), "float32")
            b = T.alloc_shared((steps * VL32,), "float32")
            c = T.alloc_shared((steps * VL32,), "float32")
            T.copy(A, a[0:n])
            T.copy(B, b[0:n])
            with T.SimdVF():
                for i in T.serial(steps):
                    mask = T.simd.update_mask(T.min(VL32, n - i * VL32))
                    va = T.simd.vld(a[i * VL32])
                    vb = T.simd.vld(b[i * VL32])
                    s = T.simd.vadd(va, vb, mask)
                    h = T.simd.vmuls(va, 0.5, mask)
                    r = T.simd.vmuls(T.simd.vmax(s, h, mask), 3.0, mask)
                    T.simd.vsts(c[i * VL32], r, mask)
            T.copy(c[0:n], C)

    return simd_arith_tail


def simd_select(n=256):
    """out = a > b ? a : b - a through vcmp (gt) and vsel."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simd_select(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), Out: T.Tensor((n,), "float32")):
        with T.Kernel(1):
            a = T.alloc_shared((n,), "float32")
            b = T.alloc_shared((n,), "float32")
            o = T.alloc_shared((n,), "float32")
            T.copy(A, a)
            T.copy(B, b)
            with T.SimdVF():
                for i in T.serial(n // VL32):
                    va = T.simd.vld(a[i * VL32])
                    vb = T.simd.vld(b[i * VL32])
                    gt = T.simd.vcmp(va, vb, op="gt")
                    T.simd.vsts(o[i * VL32], T.simd.vsel(va, T.simd.vsub(vb, va), gt))
            T.copy(o, Out)

    return simd_select


def simd_int_logic(n=256):
    """int32: x = ((a & b) | (a ^ 0x5A5A)) << 3 with vand/vor/vxor/vshls."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simd_int_logic(A: T.Tensor((n,), "int32"), B: T.Tensor((n,), "int32"), X: T.Tensor((n,), "int32")):
        with T.Kernel(1):
            a = T.alloc_shared((n,), "int32")
            b = T.alloc_shared((n,), "int32")
            x = T.alloc_shared((n,), "int32")
            T.copy(A, a)
            T.copy(B, b)
            with T.SimdVF():
                for i in T.serial(n // VL32):
                    va = T.simd.vld(a[i * VL32])
                    vb = T.simd.vld(b[i * VL32])
                    k = T.simd.vdup(T.int32(0x5A5A), "int32")
                    r = T.simd.vor(T.simd.vand(va, vb), T.simd.vxor(va, k))
                    T.simd.vsts(x[i * VL32], T.simd.vshls(r, T.int16(3)))
            T.copy(x, X)

    return simd_int_logic


def simd_row_reduce(m=8, n=64):
    """Row max, sum and absmax of an [8, 64] tile with explicit registers: vcmax / vcadd / vabs reduce a
    row into lane 0, vdupv broadcasts it, an 8-lane masked vsts writes it over that row's 32-byte block.
    (T.reduce_* inside SimdVF is not used: TileLang 0.1.15 stores each row's whole register at a 64-float
    stride into the 8-float destination.)"""
    import tilelang.ascend.language as T

    @T.prim_func
    def simd_row_reduce(A: T.Tensor((m, n), "float32"), MX: T.Tensor((m, 8), "float32"),
                        S: T.Tensor((m, 8), "float32"), AM: T.Tensor((m, 8), "float32")):
        with T.Kernel(1):
            a = T.alloc_shared((m, n), "float32")
            mx = T.alloc_shared((m, 8), "float32")
            s = T.alloc_shared((m, 8), "float32")
            am = T.alloc_shared((m, 8), "float32")
            T.copy(A, a)
            with T.SimdVF():
                for r in T.serial(m):
                    v = T.simd.vld(a[r, 0])
                    lanes8 = T.simd.update_mask(8)
                    T.simd.vsts(mx[r, 0], T.simd.vdupv(T.simd.vcmax(v)), lanes8, extent=8)
                    T.simd.vsts(s[r, 0], T.simd.vdupv(T.simd.vcadd(v)), lanes8, extent=8)
                    T.simd.vsts(am[r, 0], T.simd.vdupv(T.simd.vcmax(T.simd.vabs(v))), lanes8, extent=8)
            T.copy(mx, MX)
            T.copy(s, S)
            T.copy(am, AM)

    return simd_row_reduce


def simd_vector_add_pipelined(n=4096, tile=256, blocks=2):
    """The vector_add pattern at a small shape with SIMD registers: T.Pipelined double-buffers the UB
    tiles, so MTE2 / V / MTE3 flags alternate between two stages."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simd_vector_add_pipelined(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"),
                                  C: T.Tensor((n,), "float32")):
        with T.Kernel(blocks) as bx:
            a = T.alloc_shared((tile,), "float32")
            b = T.alloc_shared((tile,), "float32")
            c = T.alloc_shared((tile,), "float32")
            for step in T.Pipelined(n // (tile * blocks), num_stages=2):
                begin = (step * blocks + bx) * tile
                T.copy(A[begin:begin + tile], a)
                T.copy(B[begin:begin + tile], b)
                with T.SimdVF():
                    for i in T.serial(tile // VL32):
                        T.simd.vsts(c[i * VL32], T.simd.vadd(T.simd.vld(a[i * VL32]), T.simd.vld(b[i * VL32])))
                T.copy(c, C[begin:begin + tile])

    return simd_vector_add_pipelined


def simd_merging(n=256):
    """MODE_MERGING register ops under a data-dependent mask (B > 0), which TileLang emits as the CCE
    builtins ``::vmax(dst, a, b, mask, MODE_MERGING)``, ``::vadds``, ``::vabs``, ``::vdup`` (of a scalar and of
    lane 0) and ``::vaxpy``: the lanes the mask leaves out keep the destination's old value (a zeroing op
    would leave 0 there)."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simd_merging(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), Out: T.Tensor((6, n), "float32")):
        with T.Kernel(1):
            a = T.alloc_shared((n,), "float32")
            b = T.alloc_shared((n,), "float32")
            o = T.alloc_shared((6, n), "float32")
            T.copy(A, a)
            T.copy(B, b)
            with T.SimdVF():
                for i in T.serial(n // VL32):
                    x = T.simd.vld(a[i * VL32])
                    y = T.simd.vld(b[i * VL32])
                    positive = T.simd.vcmps(y, 0.0, op="gt")
                    r = T.alloc_var("float32x64")
                    r = T.simd.vdup(-1.0, "float32")
                    r = T.simd.vmax(r, x, positive, mode="MODE_MERGING")
                    T.simd.vsts(o[0, i * VL32], r)
                    r = x
                    r = T.simd.vadds(x, 10.0, positive, mode="MODE_MERGING")
                    T.simd.vsts(o[1, i * VL32], r)
                    r = y
                    r = T.simd.vabs(x, positive, mode="MODE_MERGING")
                    T.simd.vsts(o[2, i * VL32], r)
                    r = x
                    r = T.simd.vdup(7.0, "float32", positive, mode="MODE_MERGING")
                    T.simd.vsts(o[3, i * VL32], r)
                    r = x
                    r = T.simd.vdupv(y, positive, mode="MODE_MERGING")
                    T.simd.vsts(o[4, i * VL32], r)
                    acc = T.simd.alloc_local((1,), "float32")
                    acc[0] = y
                    T.simd.vaxpy(acc[0], x, 2.0, positive, mode="MODE_MERGING")
                    T.simd.vsts(o[5, i * VL32], acc[0])
            T.copy(o, Out)

    return simd_merging


def simd_cast_e2m1_to_bf16(nbytes=128):
    """vld UNPK4_B8 spreads 64 bytes of e2m1 pairs one per 32-bit lane; vcvt e2m1x2 -> bf16 PART_P0 turns
    byte 4k's low and high nibble into bf16 lanes 2k and 2k + 1 (RegLayout positions count bytes)."""
    import tilelang.ascend.language as T

    @T.prim_func
    def simd_cast_e2m1_to_bf16(A: T.Tensor((nbytes,), "uint8"), B: T.Tensor((2 * nbytes,), "bfloat16")):
        with T.Kernel(1):
            a = T.alloc_shared((nbytes,), "uint8")
            b = T.alloc_shared((2 * nbytes,), "bfloat16")
            T.copy(A, a)
            with T.SimdVF():
                lanes16 = T.simd.pset(16)
                for i in T.serial(nbytes // 64):
                    bits = T.simd.vld(a[i * 64], "UNPK4_B8")
                    pairs = T.reinterpret(bits, "float4_e2m1fnx512")
                    T.simd.vsts(b[i * 128], T.simd.vcvt(pairs, "bfloat16", lanes16, part=0), lanes16)
            T.copy(b, B)

    return simd_cast_e2m1_to_bf16


def _rows8(per_row):
    return per_row[:, None].expand(-1, 8).contiguous()


def _merged(a, b):
    """The six simd_merging rows: each op's result where b > 0, the destination's old value elsewhere (vdupv
    broadcasts lane 0 of each 64-lane register)."""
    selected = b > 0
    lane0 = b.view(-1, 64)[:, :1].expand(-1, 64).reshape(-1)
    return torch.stack([torch.where(selected, torch.clamp(a, min=-1.0), -1.0), torch.where(selected, a + 10.0, a),
                        torch.where(selected, a.abs(), b), torch.where(selected, 7.0, a),
                        torch.where(selected, lane0, a), torch.where(selected, torch.addcmul(b, a, torch.tensor(2.0)), b)])


def _e2m1_pairs(a):
    """Each byte's low then high E2M1 nibble as bf16 values."""
    magnitude = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    nibbles = torch.stack([a & 0xF, a >> 4], dim=-1).reshape(-1).long()
    values = magnitude[nibbles & 7] * torch.where(nibbles >= 8, -1.0, 1.0)
    return values.to(torch.bfloat16)


def _sum_tol():
    return dict(check="close", atol=1e-5, rtol=1e-5)


CASES = [
    Case("simd_cast_f32_to_bf16", "vector", simd_cast_f32_to_bf16,
         lambda g: [special_f32(256, g, 4.0), sentinel((256,), torch.bfloat16)],
         lambda a, b: {1: to_saturating(a, torch.bfloat16)},
         "vld NORM, vcvt f32->bf16 RS_ENABLE (saturating: +-Inf -> +-max, NaN -> 0) PART_EVEN RNE, vsts PK_B32"),
    Case("simd_cast_f32_to_fp8", "vector", simd_cast_f32_to_fp8,
         lambda g: [special_f32(256, g, 64.0), sentinel((256,), torch.float8_e4m3fn)],
         lambda a, b: {1: to_fp8_saturating(a, torch.float8_e4m3fn, 448.0)},
         "vcvt f32->fp8 E4M3 saturating PART_P0, vsts PK4_B32"),
    Case("simd_cast_bf16_to_f32", "vector", simd_cast_bf16_to_f32,
         lambda g: [randn(g, (256,), torch.bfloat16, 100.0), sentinel((256,), torch.float32)],
         lambda a, b: {1: a.float()}, "vld UNPK_B16, vcvt bf16->f32 PART_EVEN"),
    Case("simd_arith_tail", "vector", simd_arith_tail,
         lambda g: [randn(g, (200,)), randn(g, (200,)), sentinel((200,), torch.float32)],
         lambda a, b, c: {2: torch.maximum(a + b, a * 0.5) * 3.0}, "vadd/vmuls/vmax under update_mask tail"),
    Case("simd_select", "vector", simd_select,
         lambda g: [randn(g, (256,)), randn(g, (256,)), sentinel((256,), torch.float32)],
         lambda a, b, o: {2: torch.where(a > b, a, b - a)}, "vcmp gt, vsel, vsub"),
    Case("simd_int_logic", "vector", simd_int_logic,
         lambda g: [randint(g, (256,), -2 ** 31, 2 ** 31), randint(g, (256,), -2 ** 31, 2 ** 31),
                    sentinel((256,), torch.int32)],
         lambda a, b, x: {2: ((a & b) | (a ^ 0x5A5A)) << 3}, "vand/vor/vxor/vdup/vshls on int32"),
    Case("simd_row_reduce", "vector", simd_row_reduce,
         lambda g: [randn(g, (8, 64)), *(sentinel((8, 8), torch.float32) for _ in range(3))],
         lambda a, mx, s, am: {1: _rows8(a.amax(1)), 2: _rows8(a.double().sum(1).float()), 3: _rows8(a.abs().amax(1))},
         "vcmax / vcadd / vabs row reductions, vdupv broadcast, 8-lane masked vsts", **_sum_tol()),
    Case("simd_vector_add_pipelined", "vector", simd_vector_add_pipelined,
         lambda g: [randn(g, (4096,)), randn(g, (4096,)), sentinel((4096,), torch.float32)],
         lambda a, b, c: {2: a + b}, "T.Pipelined UB double buffering with flags, SIMD vadd"),
    Case("simd_merging", "vector", simd_merging,
         lambda g: [randn(g, (256,)), randn(g, (256,)), sentinel((6, 256), torch.float32)],
         lambda a, b, o: {2: _merged(a, b)},
         "MODE_MERGING vmax / vadds / vabs / vdup / vdupv / vaxpy (CCE ::op(dst, ..., MODE_MERGING)): unselected lanes "
         "keep dst"),
    Case("simd_cast_e2m1_to_bf16", "vector", simd_cast_e2m1_to_bf16,
         lambda g: [torch.cat([torch.arange(0, 256, 17), torch.arange(16) * 16 + torch.arange(15, -1, -1),
                               randint(g, (96,), 0, 256, torch.int64)]).to(torch.uint8),
                    sentinel((256,), torch.bfloat16)],
         lambda a, b: {1: _e2m1_pairs(a)},
         "vld UNPK4_B8, vcvt e2m1x2 -> bf16 PART_P0: both nibbles of every fourth byte, low nibble first"),
]
