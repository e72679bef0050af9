"""SIMT conversions: every lane converts one element through the asc_bf16/fp16/fp8 conversion
functions. The inputs carry +-0, +-Inf, NaN, out-of-range values, float32 subnormals and exact ties
(see data.special_f32), so saturation, NaN handling and round-to-nearest-even are all pinned.

Expected values follow Huawei's documented semantics: FP16/BF16 round to nearest even and overflow
to Inf; FP8 conversions use the saturating mode TileLang emits (__ASC_SATFINITE): out of range and
+-Inf clamp to the largest finite value (448 for E4M3, 57344 for E5M2) and NaN becomes +0.

No ``from __future__ import annotations``: TileLang evaluates the ``T.Tensor`` annotations."""
import torch

from .case import Case
from .data import randint, randn, sentinel, special_f32

N = 256
TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
         "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "int32": torch.int32}
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def simt_cast(src, dst, n=N, name="simt_cast"):
    import tilelang.ascend.language as T

    @T.prim_func
    def simt_cast(A: T.Tensor((n,), src), B: T.Tensor((n,), dst)):
        with T.Kernel(1):
            a = T.alloc_shared((n,), src)
            b = T.alloc_shared((n,), dst)
            T.copy(A, a)
            with T.SimtVF(threads=64):
                for i in T.Parallel(n):
                    b[i] = T.Cast(dst, a[i])
            T.copy(b, B)

    simt_cast.__name__ = name
    return simt_cast


def to_fp8_saturating(x: torch.Tensor, dtype: torch.dtype, limit: float) -> torch.Tensor:
    """The documented __ASC_SATFINITE conversion: clamp (Inf included) to +-limit, NaN -> +0, then RNE."""
    x = torch.where(torch.isnan(x), torch.zeros_like(x), x).clamp(-limit, limit)
    return x.to(dtype)


def to_saturating(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A saturating float conversion (reg/data_type_convert/rounding_mode.md, saturation mode): out of range
    and +-Inf -> the type's +-max, NaN -> 0, otherwise round to nearest even."""
    return to_fp8_saturating(x, dtype, torch.finfo(dtype).max)


def _inputs(src, dst):
    def make(g):
        if src == "float32":
            scale = {"float8_e4m3fn": 64.0, "float8_e5m2": 4096.0}.get(dst, 4.0)
            a = special_f32(N, g, scale)
        elif src in FP8_MAX:
            a = randint(g, (N,), 0, 256, torch.uint8).view(TORCH[src])  # every byte pattern, NaN included
        else:
            a = randn(g, (N,), TORCH[src], 16.0)
            a[:4] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0])
        return [a, sentinel((N,), TORCH[dst])]
    return make


def _reference(src, dst):
    def ref(a, b):
        if dst in FP8_MAX:
            return {1: to_fp8_saturating(a.float(), TORCH[dst], FP8_MAX[dst])}
        return {1: a.to(TORCH[dst])}
    return ref


def _case(src, dst, construct):
    name = f"simt_cast_{src}_to_{dst}".replace("float", "f").replace("bf16", "bf16")
    return Case(name, "vector", lambda: simt_cast(src, dst, name=name), _inputs(src, dst), _reference(src, dst),
                construct)


CASES = [
    _case("float32", "bfloat16", "__float22bfloat162_rn: RNE ties, overflow to Inf, NaN, subnormals"),
    _case("float32", "float16", "__float22half2_rn: RNE ties, 65520 -> Inf, fp16 subnormals"),
    _case("float32", "float8_e4m3fn", "__asc_cvt_float2_to_fp8x2 E4M3 SATFINITE: 464 -> 448, NaN -> 0"),
    _case("float32", "float8_e5m2", "__asc_cvt_float2_to_fp8x2 E5M2 SATFINITE: Inf -> 57344"),
    _case("bfloat16", "float32", "__bfloat1622float2 (exact widening, NaN kept)"),
    _case("float16", "float32", "__half22float2 (exact widening, subnormals)"),
    _case("float8_e4m3fn", "float32", "fp8 E4M3 -> float32 for all 256 byte patterns"),
    _case("float8_e5m2", "float32", "fp8 E5M2 -> float32 for all 256 byte patterns"),
]
