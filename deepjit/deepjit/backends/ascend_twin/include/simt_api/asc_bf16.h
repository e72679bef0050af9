// simt_api/asc_bf16.h — bfloat16_t and bfloat16x2_t with the SIMT conversions TileLang emits
// (__bfloat162float, __float2bfloat16_rn, __bfloat1622float2, __float22bfloat162_rn): widening is
// exact, narrowing rounds half to even, NaN becomes 0xFFFF as in torch (dj_twin/types.h).
#pragma once

#include "dj_twin/types.h"
#include "simt_api/asc_simt.h"

struct alignas(4) bfloat16x2_t {
  bfloat16_t x, y;
};
using __nv_bfloat162 = bfloat16x2_t;
inline bfloat16x2_t make_bfloat162(bfloat16_t x, bfloat16_t y) { return bfloat16x2_t{x, y}; }
inline float __bfloat162float(bfloat16_t h) { return float(h); }
inline bfloat16_t __float2bfloat16_rn(float f) { return bfloat16_t::from_bits(::dj_twin::float_to_bf16(f)); }
inline bfloat16_t __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float2 __bfloat1622float2(bfloat16x2_t h) { return float2{float(h.x), float(h.y)}; }
inline bfloat16x2_t __float22bfloat162_rn(float2 f) {
  return bfloat16x2_t{__float2bfloat16_rn(f.x), __float2bfloat16_rn(f.y)};
}
