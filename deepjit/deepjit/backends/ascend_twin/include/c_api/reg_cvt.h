// Ascend twin: register type conversion — the CCE `vcvt(dst, src, mask, controls...)` TileLang calls
// (simd_inst::vcvt, nd2nz_copy.h) with the documented semantics of AscendC's asc_<src>2<dst>_* reg ops
// (docs reg/data_type_convert/*.md and rounding_mode.md):
//  - controls in any order: ROUND_R (rint, ties to even) / ROUND_A (ties away) / ROUND_F (floor) /
//    ROUND_C (ceil) / ROUND_Z (trunc) / ROUND_O (round to odd); RS_ENABLE / RS_DISABLE (saturation);
//    PART_EVEN/ODD (2:1 width ratio) or PART_P0..P3 (4:1); MODE_ZEROING / MODE_MERGING.
//  - narrowing by r: source element i goes to destination element r*i + part, every other destination
//    element is 0; widening by r: destination element i comes from source element r*i + part. 4-bit pairs
//    (e2m1x2, e1m2x2, s4x2): RegLayout's positions count *bytes* ("对于每一字节，其索引为下标i%4"), so wide
//    elements 2k and 2k+1 pair with the low and high nibble of narrow byte (w/4)*k + part (w: the wide
//    element's bits), and every other narrow byte is 0. The mask selects lanes of the wider operand;
//    masked-off results are 0 (MODE_MERGING keeps the old destination instead).
//  - float -> float: non-saturating overflow -> +-inf (E4M3: NaN), NaN -> NaN; saturating overflow and
//    +-inf -> +-max finite, NaN -> 0. E2M1/E1M2 have no inf/NaN and always saturate.
//  - float -> int: NaN -> 0, +-inf -> the type's max/min; out of range: saturating clamps,
//    non-saturating keeps the low bits of the rounded integer.
//  - int -> int: widening sign-/zero-extends by the source's signedness; narrowing saturates (clamp) or
//    keeps the low bits.
#pragma once

#include "c_api/reg_lane.h"

namespace dj_twin {
namespace vreg {

inline constexpr Format kF32{8, 23, 127, true, false, true, 0x7FC00000u, false};

template <int F, class... C> constexpr int control(int def) {
  int v = def;
  ((is_family<C, F>::value ? (v = int(C{}), 0) : 0), ...);
  return v;
}

inline dj_twin::Round to_round(int r) {
  switch (r) {
    case R_A: return dj_twin::Round::Round;
    case R_F: return Round::Floor;
    case R_C: return Round::Ceil;
    case R_Z: return Round::Trunc;
    case R_O: return Round::Odd;
    default: return Round::Rint;
  }
}

// Element j of a register viewed as `bits`-wide elements (4 for fp4 pairs).
template <class V> constexpr int elem_bits() {
  return (V::kind == Kind::E2M1X2 || V::kind == Kind::E1M2X2 || V::kind == Kind::S4X2) ? 4 : 8 * V::width;
}
template <class V> inline uint64_t elem_get(const V& v, int j) {
  if constexpr (elem_bits<V>() == 4) return (uint8_t(v.e[j >> 1]) >> (4 * (j & 1))) & 0xF;
  else return uint64_t(std::make_unsigned_t<typename V::bits_t>(v.e[j]));
}
template <class V> inline void elem_set(V& v, int j, uint64_t bits) {
  if constexpr (elem_bits<V>() == 4) {
    uint8_t& b = reinterpret_cast<uint8_t&>(v.e[j >> 1]);
    b = uint8_t((b & ~(0xF << (4 * (j & 1)))) | ((bits & 0xF) << (4 * (j & 1))));
  } else {
    v.e[j] = typename V::bits_t(bits);
  }
}

template <Kind K> inline const Format& float_format() {
  if constexpr (K == Kind::F32) return kF32;
  else return *format_of<K>();
}

template <class V> inline float elem_float(const V& v, int j) {
  const uint64_t b = elem_get(v, j);
  if constexpr (V::kind == Kind::F32) return bits_float(uint32_t(b));
  else if constexpr (V::kind == Kind::E8M0) return decode_e8m0(uint8_t(b));
  else return decode(uint32_t(b), *format_of<V::kind>());
}

// A 64-bit integer magnitude rounded into a float format (exact rounding, no double rounding).
inline uint32_t encode_int(uint64_t mag, bool neg, const Format& f, Round mode) {
  const uint32_t sign = neg ? 1u << (f.exp_bits + f.man_bits) : 0;
  if (mag == 0) return sign;
  int exp = bit_length(mag) - 1;
  uint64_t q;
  if (exp <= f.man_bits) {
    q = mag << (f.man_bits - exp);
  } else {
    const int shift = exp - f.man_bits;
    q = round_quotient(mag >> shift, mag & ((1ull << shift) - 1), shift, neg, mode);
    if (q >> (f.man_bits + 1)) { q >>= 1; ++exp; }
  }
  const int exp_field = exp + f.bias;
  if (exp_field >= (1 << f.exp_bits) - 1) return sign | (((1u << f.exp_bits) - 1) << f.man_bits);  // inf
  return sign | (uint32_t(exp_field) << f.man_bits) | uint32_t(q & ((1ull << f.man_bits) - 1));
}

// Float -> integer of `bits` width with rounding; returns the destination bit pattern.
inline uint64_t float_to_int(float x, int bits, bool is_signed, Round mode, bool sat) {
  const double lo = is_signed ? -std::ldexp(1.0, bits - 1) : 0.0;
  const double hi = is_signed ? std::ldexp(1.0, bits - 1) - 1 : std::ldexp(1.0, bits) - 1;
  const uint64_t wmask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  if (std::isnan(x)) return 0;
  if (std::isinf(x)) return uint64_t(int64_t(x > 0 ? hi : lo)) & wmask;
  double v = x;
  switch (mode) {
    case Round::Rint: v = std::nearbyint(v); break;
    case Round::Round: v = std::round(v); break;
    case Round::Floor: v = std::floor(v); break;
    case Round::Ceil: v = std::ceil(v); break;
    case Round::Trunc: v = std::trunc(v); break;
    case Round::Odd: { double t = std::trunc(v); v = (t != v && std::fmod(std::fabs(t), 2.0) == 0) ? t + (v > 0 ? 1 : -1) : t; break; }
  }
  if (sat) {
    v = v < lo ? lo : (v > hi ? hi : v);
    return v < 0 ? uint64_t(int64_t(v)) & wmask : uint64_t(v) & wmask;
  }
  // Low bits of the (exact) rounded integer.
  const double m = std::fmod(std::fabs(v), 18446744073709551616.0);
  uint64_t u = uint64_t(m);
  if (v < 0) u = ~u + 1;
  return u & wmask;
}

template <class D, class S> inline uint64_t convert_elem(const S& src, int j, Round mode, bool sat) {
  constexpr bool sf = lane<S::kind>::is_float, df = lane<D::kind>::is_float;
  constexpr int db = elem_bits<D>();
  if constexpr (sf && df) {
    static_assert(D::kind != Kind::HIF8 && S::kind != Kind::HIF8, "vcvt: hifloat8 is not implemented on the Ascend twin");
    static_assert(D::kind != Kind::E8M0, "vcvt: conversion to e8m0 is not implemented on the Ascend twin");
    const float x = elem_float(src, j);
    if constexpr (D::kind == Kind::F32) return float_bits(x);
    else return encode(x, float_format<D::kind>(), mode, sat);
  } else if constexpr (sf && !df) {
    return float_to_int(elem_float(src, j), db, lane<D::kind>::is_signed, mode, sat);
  } else {
    // Integer source: its value by its own signedness.
    const uint64_t raw = elem_get(src, j);
    constexpr int sb = elem_bits<S>();
    int64_t sv = int64_t(raw);
    bool neg = false;
    if constexpr (lane<S::kind>::is_signed) {
      if (sb < 64 && ((raw >> (sb - 1)) & 1)) sv = int64_t(raw | (~0ull << sb));
      neg = sv < 0;
    }
    if constexpr (df) {
      const uint64_t mag = neg ? uint64_t(0) - uint64_t(sv) : raw;
      return encode_int(mag, neg, float_format<D::kind>(), mode);
    } else {
      const uint64_t wmask = db == 64 ? ~0ull : (1ull << db) - 1;
      if (!sat) return uint64_t(sv) & wmask;
      if constexpr (lane<D::kind>::is_signed) {
        const int64_t hi = db == 64 ? INT64_MAX : (int64_t(1) << (db - 1)) - 1, lo = -hi - 1;
        if (lane<S::kind>::is_signed) return uint64_t(sv < lo ? lo : (sv > hi ? hi : sv)) & wmask;
        return raw > uint64_t(hi) ? uint64_t(hi) : raw;
      } else {
        if (neg) return 0;
        return raw > wmask ? wmask : raw;
      }
    }
  }
}

}  // namespace vreg
}  // namespace dj_twin

template <class D, class S, class... C, class = djv::if_reg<D>, class = djv::if_reg<S>>
inline void vcvt(D& dst, S src, vector_bool m, C... controls) {
  (void)sizeof...(controls);
  namespace v = dj_twin::vreg;
  const dj_twin::Round mode = v::to_round(v::control<v::ROUND, C...>(v::R_R));
  const bool sat = v::control<v::RS, C...>(0) != 0;
  const int part = v::control<v::PART, C...>(0);
  const bool merging = v::control<v::MODE, C...>(0) == int(MODE_MERGING);
  constexpr int sb = v::elem_bits<S>(), db = v::elem_bits<D>();
  constexpr int ns = v::VL * 8 / sb, nd = v::VL * 8 / db;
  const D old = dst;
  D out;
  // The narrow operand's element paired with wide element i.
  auto narrow_index = [part](int i, int r, int wide_bits) {
    if (wide_bits > 4 && (sb == 4 || db == 4)) return 2 * ((wide_bits / 4) * (i / 2) + part) + (i & 1);
    return r * i + part;
  };
  if constexpr (sb >= db) {  // narrowing (or same width): source element i -> r*i + part
    constexpr int r = sb / db;
    for (int i = 0; i < ns; ++i) {
      const int j = narrow_index(i, r, sb);
      if (m.bit(i * sb / 8)) v::elem_set(out, j, v::convert_elem<D>(src, i, mode, sat));
      else if (merging) v::elem_set(out, j, v::elem_get(old, j));
    }
  } else {  // widening: destination element i <- source element r*i + part
    constexpr int r = db / sb;
    for (int i = 0; i < nd; ++i) {
      if (m.bit(i * db / 8)) v::elem_set(out, i, v::convert_elem<D>(src, narrow_index(i, r, db), mode, sat));
      else if (merging) v::elem_set(out, i, v::elem_get(old, i));
    }
  }
  out.step = dj_twin::count_vector_ops(ns > nd ? ns : nd, dj_twin::VecClass::Simple, djv::step_of(src, m));
  dst = out;
}

// asc_bfloat162float / _v2: the even / odd BF16 elements of src widened to FP32 (exact); asc-devkit's reg API
// implements them as vcvt(dst, src, mask, PART_EVEN / PART_ODD, MODE_ZEROING) (docs "asc_bfloat162float":
// 数据读取索引为偶数 / 奇数的位置).
inline void asc_bfloat162float(vector_float& dst, vector_bfloat16_t src, vector_bool m) {
  vcvt(dst, src, m, PART_EVEN, MODE_ZEROING);
}
inline void asc_bfloat162float_v2(vector_float& dst, vector_bfloat16_t src, vector_bool m) {
  vcvt(dst, src, m, PART_ODD, MODE_ZEROING);
}

// asc_float2bfloat16_rn / _v2: FP32 rounded to nearest even (non-saturating: overflow to +-inf, NaN stays NaN)
// into the even / odd BF16 elements, the other elements 0; asc-devkit: vcvt(dst, src, mask, ROUND_R,
// RS_DISABLE, PART_EVEN / PART_ODD, MODE_ZEROING) (docs "asc_float2bfloat16": _v2 结果写入dst的奇数索引位置).
inline void asc_float2bfloat16_rn(vector_bfloat16_t& dst, vector_float src, vector_bool m) {
  vcvt(dst, src, m, ROUND_R, RS_DISABLE, PART_EVEN, MODE_ZEROING);
}
inline void asc_float2bfloat16_rn_v2(vector_bfloat16_t& dst, vector_float src, vector_bool m) {
  vcvt(dst, src, m, ROUND_R, RS_DISABLE, PART_ODD, MODE_ZEROING);
}

// asc_float2half_rn: FP32 rounded to nearest even into the even FP16 elements (non-saturating: overflow to
// +-inf, NaN stays NaN), the other elements 0; asc-devkit: vcvt(dst, src, mask, ROUND_R, RS_DISABLE, PART_EVEN,
// MODE_ZEROING) (docs "asc_float2half": 非饱和模式, 数据写入索引为偶数的位置). Its _v2 (odd elements) is
// deprecated there as unsupported on the device, so the twin leaves it out.
inline void asc_float2half_rn(vector_half& dst, vector_float src, vector_bool m) {
  vcvt(dst, src, m, ROUND_R, RS_DISABLE, PART_EVEN, MODE_ZEROING);
}

// asc_float2e4m3_rn / _v2 / _v3 / _v4: FP32 rounded to nearest even into E4M3FN byte quarter 0 / 1 / 2 / 3
// (1:4 width ratio: FP32 lane i -> byte 4i + quarter, the lane's byte `quarter`), masked-off lanes 0; asc-devkit's
// reg API expands them to vcvt(dst, src, mask, ROUND_R, RS_DISABLE, PART_P0 .. PART_P3, MODE_ZEROING)
// (impl/c_api/instr_impl/npu_arch_3510/vector_compute_impl/vconv/asc_float2e4m3_impl.h). Docs "asc_float2e4m3":
// non-saturating, overflow and +-inf give the format's inf (E4M3FN has none: its NaN, S.1111.111), NaN stays NaN;
// the _sat forms (RS_ENABLE) give +-448 for overflow and +-inf and 0 for NaN.
#define DJ_TWIN_E4M3_NARROWING(SUFFIX, PART)                                                              \
  inline void asc_float2e4m3_rn##SUFFIX(vector_fp8_e4m3fn_t& dst, vector_float src, vector_bool m) {     \
    vcvt(dst, src, m, ROUND_R, RS_DISABLE, PART, MODE_ZEROING);                                           \
  }                                                                                                       \
  inline void asc_float2e4m3_rn_sat##SUFFIX(vector_fp8_e4m3fn_t& dst, vector_float src, vector_bool m) { \
    vcvt(dst, src, m, ROUND_R, RS_ENABLE, PART, MODE_ZEROING);                                            \
  }
DJ_TWIN_E4M3_NARROWING(, PART_P0)
DJ_TWIN_E4M3_NARROWING(_v2, PART_P1)
DJ_TWIN_E4M3_NARROWING(_v3, PART_P2)
DJ_TWIN_E4M3_NARROWING(_v4, PART_P3)
#undef DJ_TWIN_E4M3_NARROWING

// A 1:4 widening and its three siblings: NAME reads part P0 of src, NAME_v2 / _v3 / _v4 parts P1 / P2 / P3,
// masked-off lanes 0 (MODE_ZEROING).
#define DJ_TWIN_QUARTER_WIDENING(NAME, D, S)                                                            \
  inline void NAME(D& dst, S src, vector_bool m) { vcvt(dst, src, m, PART_P0, MODE_ZEROING); }     \
  inline void NAME##_v2(D& dst, S src, vector_bool m) { vcvt(dst, src, m, PART_P1, MODE_ZEROING); } \
  inline void NAME##_v3(D& dst, S src, vector_bool m) { vcvt(dst, src, m, PART_P2, MODE_ZEROING); } \
  inline void NAME##_v4(D& dst, S src, vector_bool m) { vcvt(dst, src, m, PART_P3, MODE_ZEROING); }

// asc_e4m32float / _v2 / _v3 / _v4: E4M3FN widened to FP32 (exact: subnormals kept, S.1111.111 NaN) from
// quarter 0 / 1 / 2 / 3 of src (1:4 width ratio: FP32 lane i <- byte 4i + quarter), masked-off lanes 0;
// asc-devkit's reg API expands them to vcvt(dst, src, mask, PART_P0 / PART_P1 / PART_P2 / PART_P3,
// MODE_ZEROING) (impl/c_api/instr_impl/npu_arch_3510/vector_compute_impl/vconv/asc_e4m32float_impl.h; docs
// "asc_e4m32float": 数据读取索引0 / 1 / 2 / 3的位置).
DJ_TWIN_QUARTER_WIDENING(asc_e4m32float, vector_float, vector_fp8_e4m3fn_t)

// asc_e2m1x22bfloat16 / _v2 / _v3 / _v4: E2M1 pairs widened to BF16 (exact) from byte quarter 0 / 1 / 2 / 3
// of src (1:4 width ratio: BF16 elements 2k and 2k + 1 <- the low and high nibble of byte 4k + quarter),
// masked-off elements 0; asc-devkit's reg API expands them to vcvt(dst, src, mask, PART_P0 / PART_P1 /
// PART_P2 / PART_P3, MODE_ZEROING) (impl/c_api/instr_impl/npu_arch_3510/vector_compute_impl/vconv/
// asc_e2m1x22bfloat16_impl.h; docs "asc_e2m1x22bfloat16": 写入索引0 / 1 / 2 / 3的位置).
DJ_TWIN_QUARTER_WIDENING(asc_e2m1x22bfloat16, vector_bfloat16_t, vector_fp4x2_e2m1_t)
#undef DJ_TWIN_QUARTER_WIDENING
