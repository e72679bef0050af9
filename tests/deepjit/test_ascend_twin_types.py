"""The twin's scalar types (dj_twin/types.h) against torch's casts: float -> bfloat16 / float16 /
float8_e5m2 / float8_e8m0fnu bit-exact on random float bit patterns (NaN, inf, subnormals, overflow
included), float8_e4m3fn bit-exact within its range, the documented E4M3 / E5M2 saturation table,
and exact widening back to float. A hand-written vector kernel converts in UB on the twin."""
import ctypes

import pytest
import torch

import deepjit
from deepjit.backends.ascend_twin import AscendLaunchOptions

N = 4096
# out8 holds e4m3, e5m2, e8m0, e4m3 saturating, e5m2 saturating; back holds widened bf16 and e4m3.
CONVERT = r"""
#include <c_api/asc_simd.h>

extern "C" __global__ __vector__ void convert(__gm__ float* x, __gm__ uint16_t* out16, __gm__ uint8_t* out8,
                                              __gm__ float* back, int32_t n) {
  asc_init();
  __ubuf__ float* ub = (__ubuf__ float*)0;
  __ubuf__ uint16_t* u16 = (__ubuf__ uint16_t*)(ub + n);
  __ubuf__ uint8_t* u8 = (__ubuf__ uint8_t*)(u16 + 2 * n);
  __ubuf__ float* ub_back = (__ubuf__ float*)(u8 + 5 * n);
  asc_copy_gm2ub_align((__ubuf__ uint8_t*)ub, (__gm__ uint8_t*)x, uint32_t(n) * 4);
  asc_sync_notify(PIPE_MTE2, PIPE_V, EVENT_ID0);
  asc_sync_wait(PIPE_MTE2, PIPE_V, EVENT_ID0);
  for (int32_t i = 0; i < n; ++i) {
    bfloat16_t b = ub[i];
    half h = ub[i];
    float8_e4m3_t e4 = ub[i];
    u16[i] = b.bits;
    u16[n + i] = h.bits;
    u8[i] = e4.bits;
    u8[n + i] = float8_e5m2_t(ub[i]).bits;
    u8[2 * n + i] = fp8_e8m0_t(ub[i]).bits;
    u8[3 * n + i] = ::dj_twin::float_to_e4m3(ub[i], true);
    u8[4 * n + i] = ::dj_twin::float_to_e5m2(ub[i], true);
    ub_back[i] = float(b);
    ub_back[n + i] = float(e4);
  }
  asc_sync_notify(PIPE_V, PIPE_MTE3, EVENT_ID0);
  asc_sync_wait(PIPE_V, PIPE_MTE3, EVENT_ID0);
  asc_copy_ub2gm_align((__gm__ uint8_t*)out16, (__ubuf__ uint8_t*)u16, uint32_t(n) * 4);
  asc_copy_ub2gm_align((__gm__ uint8_t*)out8, (__ubuf__ uint8_t*)u8, uint32_t(n) * 5);
  asc_copy_ub2gm_align((__gm__ uint8_t*)back, (__ubuf__ uint8_t*)ub_back, uint32_t(n) * 8);
}
"""
SPECIALS = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 448.0, 464.0, 465.0, 480.0, 1e4, -1e4, 57344.0,
            61439.0, 61440.0, 65504.0, 65520.0, 3.4e38, 1e-45, -1e-45, 2.0 ** -127, 2.0 ** -126, 2.0 ** -9, 2.0 ** -10]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    pkg = tmp_path_factory.mktemp("twintypes") / "twintypes"
    (pkg / "ascend").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ascend" / "convert.asc").write_text(CONVERT)
    lib = deepjit.KernelLibrary("twintypes", "TWT", str(pkg / "__init__.py"), "0.1")
    g = torch.Generator().manual_seed(3)
    bits = torch.randint(-(1 << 31), 1 << 31, (N - len(SPECIALS) - 1024,), generator=g, dtype=torch.int64)
    x = torch.cat([torch.tensor(SPECIALS), torch.randn(1024, generator=g) * 300,
                   bits.to(torch.int32).view(torch.float32)])
    out16, out8, back = torch.zeros(2 * N, dtype=torch.int16), torch.zeros(5 * N, dtype=torch.uint8), torch.zeros(2 * N)
    lib.ascend_kernel("convert", "ascend/convert.asc").launch(AscendLaunchOptions(num_blocks=1), x, out16, out8, back,
                                                                ctypes.c_int32(N))
    return x, out16.view(2, N), out8.view(5, N), back.view(2, N)


def test_narrowing_matches_torch(converted):
    x, out16, out8, _ = converted
    assert torch.equal(out16[0], x.to(torch.bfloat16).view(torch.int16))
    assert torch.equal(out16[1], x.to(torch.float16).view(torch.int16))
    assert torch.equal(out8[1], x.to(torch.float8_e5m2).view(torch.uint8))
    assert torch.equal(out8[2], x.to(torch.float8_e8m0fnu).view(torch.uint8))
    fin = x.abs() <= 448
    assert torch.equal(out8[0][fin], x[fin].to(torch.float8_e4m3fn).view(torch.uint8))


def test_fp8_specials_follow_the_documented_table(converted):
    x, _, out8, _ = converted
    at = {v: i for i, v in reversed(list(enumerate(SPECIALS))) if v == v}
    e4, e5, e4s, e5s = out8[0], out8[1], out8[3], out8[4]
    nan, inf = next(i for i, v in enumerate(SPECIALS) if v != v), at[float("inf")]
    assert (e4[nan], e4[inf], e4[at[480.0]], e4[at[464.0]]) == (0x7F, 0x7F, 0x7F, 0x7E)  # NaN, NaN, NaN, 448 (tie)
    assert (e4s[nan], e4s[inf], e4s[at[1e4]], e4s[at[-1e4]]) == (0, 0x7E, 0x7E, 0xFE)      # +0, 448, 448, -448
    assert (e5[inf], e5[at[61440.0]], e5[at[61439.0]]) == (0x7C, 0x7C, 0x7B)               # inf, inf, 57344
    assert (e5s[nan], e5s[inf], e5s[at[65504.0]]) == (0, 0x7B, 0x7B)                       # +0, 57344, 57344


def test_widening_is_exact(converted):
    x, _, _, back = converted
    assert torch.equal(back[0].view(torch.int32), x.to(torch.bfloat16).float().view(torch.int32))
    fin = x.abs() <= 448
    assert torch.equal(back[1][fin], x[fin].to(torch.float8_e4m3fn).float())
