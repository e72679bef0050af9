// simt_api/asc_fp8.h — FP8 pairs and their SIMT conversions (docs/zh/api/SIMT-API/数学函数/fp8类型):
// __asc_cvt_float2_to_fp8x2 rounds half to even (CAST_RINT) and, per its special-value table,
// saturates (__ASC_SATFINITE: NaN -> +0, inf/overflow -> +-max) or not (__ASC_NOSAT: E4M3 NaN for
// NaN/inf/overflow, E5M2 inf for inf/overflow). Element 0 is the low byte of the 16-bit storage.
#pragma once

#include "dj_twin/types.h"
#include "simt_api/asc_simt.h"

typedef enum __asc_fp8_interpretation_t { __ASC_E4M3, __ASC_E5M2 } __asc_fp8_interpretation_t;
typedef enum __asc_saturation_t { __ASC_NOSAT, __ASC_SATFINITE } __asc_saturation_t;
typedef unsigned short int __asc_fp8x2_storage_t;

struct alignas(2) float8_e4m3x2_t {
  float8_e4m3_t x, y;
};
struct alignas(2) float8_e5m2x2_t {
  float8_e5m2_t x, y;
};

inline __asc_fp8x2_storage_t __asc_cvt_float2_to_fp8x2(const float2 x, const __asc_saturation_t saturate,
                                                       const __asc_fp8_interpretation_t interpretation) {
  bool sat = saturate == __ASC_SATFINITE;
  auto one = [&](float v) -> uint16_t {
    return interpretation == __ASC_E4M3 ? ::dj_twin::float_to_e4m3(v, sat) : ::dj_twin::float_to_e5m2(v, sat);
  };
  return __asc_fp8x2_storage_t(one(x.x) | (one(x.y) << 8));
}
inline float2 __e4m3x22float2(const float8_e4m3x2_t x) { return float2{float(x.x), float(x.y)}; }
inline float2 __e5m2x22float2(const float8_e5m2x2_t x) { return float2{float(x.x), float(x.y)}; }
