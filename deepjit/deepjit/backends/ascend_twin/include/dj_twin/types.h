// dj_twin/types.h — the Ascend twin's scalar types and their exact float conversions.
//
// bfloat16_t, half (IEEE binary16), float8_e4m3_t (E4M3FN: no inf, NaN = S.1111.111, max 448),
// float8_e5m2_t (IEEE-like: inf and NaN), float4_e2m1x2_t / float4_e1m2x2_t (two E2M1 / E1M2 values in
// one byte, element 0 in the low nibble; no inf/NaN, max 6 / 1.75), fp8_e8m0_t / float8_e8m0_t (unsigned
// power of two 2^(e-127), 0xFF = NaN).
//
// Rounding: every float -> narrow conversion goes through one encoder, `dj_twin::encode`, with a
// rounding mode (Round::Rint = round half to even, the default for casts and CAST_RINT in the
// AscendC docs) and a saturation flag. Special values follow the AscendC SIMT/reg convert docs
// (docs/zh/api/SIMT-API/.../__asc_cvt_float2_to_fp8x2.md):
//   E4M3 non-saturating: NaN -> NaN, +-inf -> NaN, |x| past the largest finite after rounding -> NaN
//   E4M3 saturating:     NaN -> +0,  +-inf -> +-448, overflow -> +-448
//   E5M2 non-saturating: NaN -> NaN, +-inf -> +-inf, overflow -> +-inf
//   E5M2 saturating:     NaN -> +0,  +-inf -> +-57344, overflow -> +-57344
// The default (implicit) conversions are round-to-nearest-even, non-saturating. For every finite
// input they are bit-identical to torch 2.13's `.to(dtype)` for bfloat16, float16, float8_e5m2 and
// float8_e8m0fnu (RNE on the exponent, NaN/inf -> 0xFF, sign ignored), and for float8_e4m3fn within
// range. NaN is written as torch 2.13 writes it: bf16 0xFFFF (any NaN), f16 quiet with the top
// payload bits (0x7E00 | sign for the default NaN), fp8 0x7F | sign. Widening (decode) is exact and
// keeps NaN payloads (bf16 0xFFFF -> 0xFFFF0000, E4M3 0x7F -> 0x7FF00000), like torch.
// torch's float8_e4m3fn cast saturates overflow and inf to +-448 but keeps NaN, which is neither of
// the chip's two modes above: compare E4M3 specials against the table, not against torch.
// E2M1 has no NaN/inf: it always saturates to +-6 and maps NaN to +0 (saturation semantics).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace dj_twin {

enum class Round : uint8_t { Rint, Round, Floor, Ceil, Trunc, Odd };

// A binary floating format: exponent and mantissa widths, exponent bias, whether the top exponent
// encodes inf/NaN (IEEE) or only the all-ones pattern is NaN (FN formats), and its NaN pattern.
struct Format {
  int exp_bits, man_bits, bias;
  bool ieee_specials;   // top exponent = inf / NaN
  bool fn_nan;          // E4M3FN: S.1111.111 is NaN, everything else finite
  bool has_nan;         // E2M1: none
  uint32_t nan_bits;    // the NaN pattern produced (without sign)
  bool nan_keeps_sign;  // torch keeps the sign on fp16/fp8 NaN, not on bf16
  bool nan_payload = false;  // fp16: quiet NaN keeping the top payload bits (IEEE / F16C conversion)
};

inline constexpr Format kBF16{8, 7, 127, true, false, true, 0xFFFF, false};
inline constexpr Format kF16{5, 10, 15, true, false, true, 0x7E00, true, true};
inline constexpr Format kE4M3{4, 3, 7, false, true, true, 0x7F, true};
inline constexpr Format kE5M2{5, 2, 15, true, false, true, 0x7F, true};
inline constexpr Format kE2M1{2, 1, 1, false, false, false, 0, false};
inline constexpr Format kE1M2{1, 2, 1, false, false, false, 0, false};  // max 1.75

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline int bit_length(uint64_t v) { return v ? 64 - __builtin_clzll(v) : 0; }

// The largest finite magnitude's bit pattern (without sign).
inline uint32_t max_finite_bits(const Format& f) {
  uint32_t top_exp = (1u << f.exp_bits) - 1, full_man = (1u << f.man_bits) - 1;
  if (f.ieee_specials) return ((top_exp - 1) << f.man_bits) | full_man;
  if (f.fn_nan) return (top_exp << f.man_bits) | (full_man - 1);
  return (top_exp << f.man_bits) | full_man;
}

// Rounds the non-negative integer q (dropped remainder `rem` of `shift` bits) per mode.
inline uint64_t round_quotient(uint64_t q, uint64_t rem, int shift, bool negative, Round mode) {
  if (shift <= 0 || rem == 0) return q;
  uint64_t half = shift > 64 ? ~0ull : (1ull << (shift - 1));
  bool above_half = shift > 64 ? false : rem > half, at_half = shift > 64 ? false : rem == half;
  switch (mode) {
    case Round::Rint: return (above_half || (at_half && (q & 1))) ? q + 1 : q;
    case Round::Round: return (above_half || at_half) ? q + 1 : q;
    case Round::Floor: return negative ? q + 1 : q;
    case Round::Ceil: return negative ? q : q + 1;
    case Round::Trunc: return q;
    case Round::Odd: return q | 1;
  }
  return q;
}

// float -> the format's bit pattern (sign in the top bit of the format's width).
inline uint32_t encode(float x, const Format& f, Round mode = Round::Rint, bool saturate = false) {
  const int width = 1 + f.exp_bits + f.man_bits;
  const uint32_t sign_bit = 1u << (width - 1);
  uint32_t u = float_bits(x);
  bool neg = u >> 31;
  uint32_t sign = neg ? sign_bit : 0;
  uint32_t exp_field = (u >> 23) & 0xFF, man = u & 0x7FFFFF;
  uint32_t max_bits = max_finite_bits(f);
  uint32_t inf_bits = ((1u << f.exp_bits) - 1) << f.man_bits;
  if (exp_field == 0xFF && man != 0) {  // NaN
    if (saturate || !f.has_nan) return 0;
    if (f.nan_payload) return sign | f.nan_bits | (man >> (23 - f.man_bits));
    return f.nan_bits | (f.nan_keeps_sign ? sign : 0);
  }
  auto overflow = [&]() -> uint32_t {
    if (saturate || !f.has_nan) return sign | max_bits;
    if (f.ieee_specials) return sign | inf_bits;
    return sign | f.nan_bits;
  };
  if (exp_field == 0xFF) return overflow();  // inf
  if (exp_field == 0 && man == 0) return sign;
  // |x| = sig * 2^p exactly.
  uint64_t sig = exp_field ? (man | 0x800000u) : man;
  int p = exp_field ? int(exp_field) - 127 - 23 : -149;
  int top = p + bit_length(sig) - 1;          // floor(log2 |x|)
  int emin = 1 - f.bias;                      // smallest normal exponent
  int qexp = (top > emin ? top : emin) - f.man_bits;  // exponent of the result's last place
  int shift = qexp - p;
  uint64_t q;
  if (shift <= 0) {
    q = sig << -shift;
  } else {
    uint64_t rem = shift >= 64 ? sig : sig & ((1ull << shift) - 1);
    q = shift >= 64 ? 0 : sig >> shift;
    q = round_quotient(q, rem, shift, neg, mode);
  }
  if (q == 0) return sign;
  // q * 2^qexp; normalise to q in [2^man, 2^(man+1)) or subnormal (q < 2^man at emin).
  if (q >> (f.man_bits + 1)) { q >>= 1; qexp += 1; }
  uint32_t bits;
  if (q < (1ull << f.man_bits)) {
    bits = uint32_t(q);
  } else {
    int e = qexp + f.man_bits + f.bias;
    if (e >= (1 << f.exp_bits)) return overflow();
    bits = (uint32_t(e) << f.man_bits) | uint32_t(q - (1ull << f.man_bits));
  }
  if (bits > max_bits) return overflow();
  return sign | bits;
}

// The format's bit pattern -> float (exact: every value of these formats is a float).
inline float decode(uint32_t bits, const Format& f) {
  const int width = 1 + f.exp_bits + f.man_bits;
  bool neg = (bits >> (width - 1)) & 1;
  uint32_t e = (bits >> f.man_bits) & ((1u << f.exp_bits) - 1), m = bits & ((1u << f.man_bits) - 1);
  uint32_t top_exp = (1u << f.exp_bits) - 1;
  float v;
  const bool nan = (f.ieee_specials && e == top_exp && m) || (f.fn_nan && e == top_exp && m == ((1u << f.man_bits) - 1));
  if (nan) return bits_float((neg ? 0x80000000u : 0u) | 0x7F800000u | (m << (23 - f.man_bits)));
  if (f.ieee_specials && e == top_exp) {
    v = INFINITY;
  } else if (e == 0) {
    v = std::ldexp(float(m), 1 - f.bias - f.man_bits);
  } else {
    v = std::ldexp(float(m | (1u << f.man_bits)), int(e) - f.bias - f.man_bits);
  }
  return neg ? -v : v;
}

// E8M0: 2^(e-127), e in [0, 254]; 0xFF = NaN. float -> E8M0 rounds the magnitude's exponent to
// nearest (ties to even on the exponent's last bit, torch's float8_e8m0fnu rule); the sign is dropped.
inline uint8_t encode_e8m0(float x) {
  uint32_t u = float_bits(x);
  uint32_t e = (u >> 23) & 0xFF;
  if (e == 0xFF) return 0xFF;
  bool g = u & 0x400000, r = u & 0x200000, s = u & 0x1FFFFF, lsb = e > 0;
  bool up = (g && (r || s)) || (g && !r && !s && lsb);
  if (up) {
    if (e == 0xFE) return 0xFF;
    e += 1;
  }
  return uint8_t(e);
}

inline float decode_e8m0(uint8_t e) {
  if (e == 0xFF) return NAN;
  return std::ldexp(1.0f, int(e) - 127);
}

// A narrow float held as its bits: implicit conversions to and from float (RNE, non-saturating);
// arithmetic happens in float (the built-in operators after the implicit conversion).
template <const Format& F, typename Storage>
struct NarrowFloat {
  Storage bits;
  NarrowFloat() = default;
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  NarrowFloat(T v) : bits(Storage(encode(float(v), F))) {}  // NOLINT: implicit like the device type
  static NarrowFloat from_bits(Storage b) { NarrowFloat r; r.bits = b; return r; }
  operator float() const { return decode(bits, F); }  // NOLINT
  template <typename T> NarrowFloat& operator+=(T o) { return *this = float(*this) + float(o); }
  template <typename T> NarrowFloat& operator-=(T o) { return *this = float(*this) - float(o); }
  template <typename T> NarrowFloat& operator*=(T o) { return *this = float(*this) * float(o); }
  template <typename T> NarrowFloat& operator/=(T o) { return *this = float(*this) / float(o); }
  NarrowFloat operator-() const { return from_bits(Storage(bits ^ (Storage(1) << (8 * sizeof(Storage) - 1)))); }
};

using bfloat16 = NarrowFloat<kBF16, uint16_t>;
using float16 = NarrowFloat<kF16, uint16_t>;
using float8_e4m3 = NarrowFloat<kE4M3, uint8_t>;
using float8_e5m2 = NarrowFloat<kE5M2, uint8_t>;

struct float8_e8m0 {
  uint8_t bits;
  float8_e8m0() = default;
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  float8_e8m0(T v) : bits(encode_e8m0(float(v))) {}  // NOLINT
  static float8_e8m0 from_bits(uint8_t b) { float8_e8m0 r; r.bits = b; return r; }
  operator float() const { return decode_e8m0(bits); }  // NOLINT
};

// Two 4-bit values per byte: element 0 in bits [3:0], element 1 in bits [7:4]; saturating.
template <const Format& F>
struct Float4x2 {
  uint8_t bits;
  Float4x2() = default;
  Float4x2(float lo, float hi)
      : bits(uint8_t(encode(lo, F, Round::Rint, true) | (encode(hi, F, Round::Rint, true) << 4))) {}
  static Float4x2 from_bits(uint8_t b) { Float4x2 r; r.bits = b; return r; }
  float get(int i) const { return decode((bits >> (4 * (i & 1))) & 0xF, F); }
};
using float4_e2m1x2 = Float4x2<kE2M1>;
using float4_e1m2x2 = Float4x2<kE1M2>;

inline uint8_t float_to_e4m3(float x, bool saturate = false) { return uint8_t(encode(x, kE4M3, Round::Rint, saturate)); }
inline uint8_t float_to_e5m2(float x, bool saturate = false) { return uint8_t(encode(x, kE5M2, Round::Rint, saturate)); }
inline uint16_t float_to_bf16(float x, Round mode = Round::Rint) { return uint16_t(encode(x, kBF16, mode)); }
inline uint16_t float_to_f16(float x, Round mode = Round::Rint, bool saturate = false) {
  return uint16_t(encode(x, kF16, mode, saturate));
}

}  // namespace dj_twin

// The device type names (the AscendC compiler's built-in types).
using bfloat16_t = ::dj_twin::bfloat16;
using half = ::dj_twin::float16;
using float16_t = ::dj_twin::float16;
using float8_e4m3_t = ::dj_twin::float8_e4m3;
using float8_e5m2_t = ::dj_twin::float8_e5m2;
using fp8_e4m3fn_t = ::dj_twin::float8_e4m3;
using fp8_e5m2_t = ::dj_twin::float8_e5m2;
using float8_e8m0_t = ::dj_twin::float8_e8m0;
using fp8_e8m0_t = ::dj_twin::float8_e8m0;
using float8_e8m0fnu = ::dj_twin::float8_e8m0;  // TileLang prints this dtype name for E8M0 parameters
using float4_e2m1x2_t = ::dj_twin::float4_e2m1x2;
using fp4x2_e2m1_t = ::dj_twin::float4_e2m1x2;
using float4_e1m2x2_t = ::dj_twin::float4_e1m2x2;
using fp4x2_e1m2_t = ::dj_twin::float4_e1m2x2;
