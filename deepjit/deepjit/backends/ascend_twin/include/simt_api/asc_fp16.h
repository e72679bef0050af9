// simt_api/asc_fp16.h — half and half2 with the SIMT conversion functions TileLang emits
// (__half22float2, __float22half2_rn, __half2float, __float2half_rn). Conversions are exact in the
// widening direction and round half to even ("_rn") when narrowing (dj_twin/types.h).
#pragma once

#include "dj_twin/types.h"
#include "simt_api/asc_simt.h"

struct alignas(4) half2 {
  half x, y;
};
inline half2 make_half2(half x, half y) { return half2{x, y}; }
inline float __half2float(half h) { return float(h); }
inline half __float2half_rn(float f) { return half::from_bits(::dj_twin::float_to_f16(f)); }
inline half __float2half(float f) { return __float2half_rn(f); }
inline float2 __half22float2(half2 h) { return float2{float(h.x), float(h.y)}; }
inline half2 __float22half2_rn(float2 f) { return half2{__float2half_rn(f.x), __float2half_rn(f.y)}; }
