// Ascend twin: predicate (mask) register ops — create/update, logic, select, interleave, pack and the
// UB loads/stores of a mask. Semantics from AscendC's asc_create_mask / asc_update_mask / asc_and ... docs.
#pragma once

#include "c_api/reg_types.h"

namespace dj_twin {
namespace vreg {

// Number of active lanes a pattern selects out of `lanes`; M3/M4 are strided and handled by the caller.
inline int pattern_count(int pat, int lanes) {
  switch (pat) {
    case P_ALL: return lanes;
    case P_VL1: return 1;
    case P_VL2: return 2;
    case P_VL3: return 3;
    case P_VL4: return 4;
    case P_VL8: return 8;
    case P_VL16: return 16;
    case P_VL32: return 32;
    case P_VL64: return 64;
    case P_VL128: return 128;
    case P_H: return lanes / 2;
    case P_Q: return lanes / 4;
    default: return 0;
  }
}

inline mask make_mask(int pat, int width) {
  const int lanes = VL / width;
  mask m;
  for (int i = 0; i < lanes; ++i) {
    bool on;
    if (pat == P_M3) on = i % 3 == 0;
    else if (pat == P_M4) on = i % 4 == 0;
    else on = i < pattern_count(pat, lanes);
    m.set_lane(i, width, on);
  }
  return m;
}

// asc_update_mask: the first min(value, VL_T) lanes; value -= VL_T, floored at 0.
inline mask update_mask(uint32_t& value, int width) {
  const uint32_t lanes = VL / width;
  mask m;
  const uint32_t n = value < lanes ? value : lanes;
  for (uint32_t i = 0; i < n; ++i) m.set_lane(int(i), width, true);
  value = value < lanes ? 0 : value - lanes;
  return m;
}

// Bitwise mask logic: bits where `m` is 0 come out 0 (zeroing, as for data registers).
template <class F> inline mask mask_bitwise(const mask& a, const mask& b, const mask& m, F f) {
  mask d;
  for (int i = 0; i < VL / 8; ++i) d.b[i] = uint8_t(f(a.b[i], b.b[i]) & m.b[i]);
  return d;
}

// Interleave two masks at `width`-bit granularity: the 512-bit concatenation a0 b0 a1 b1 ... split into
// the low (d0) and high (d1) 256 bits.
inline void mask_intlv(mask& d0, mask& d1, const mask& a, const mask& b, int width) {
  const int n = VL * 8 / width;  // groups per register
  mask out[2];
  for (int i = 0; i < n; ++i) {
    for (int s = 0; s < 2; ++s) {
      const mask& src = s ? b : a;
      const int g = 2 * i + s;
      for (int k = 0; k < width; ++k) out[g / n].set((g % n) * width + k, src.bit(i * width + k));
    }
  }
  d0 = out[0];
  d1 = out[1];
}

// Inverse of mask_intlv: even groups of (a, b) concatenated go to d0, odd groups to d1.
inline void mask_deintlv(mask& d0, mask& d1, const mask& a, const mask& b, int width) {
  const int n = VL * 8 / width;
  mask out[2];
  for (int g = 0; g < 2 * n; ++g) {
    const mask& src = g < n ? a : b;
    const int gi = g % n;
    for (int k = 0; k < width; ++k) out[g & 1].set((g / 2) * width + k, src.bit(gi * width + k));
  }
  d0 = out[0];
  d1 = out[1];
}

}  // namespace vreg
}  // namespace dj_twin

template <class Pat> inline vector_bool asc_create_mask_b8(Pat pat) { return dj_twin::vreg::make_mask(int(pat), 1); }
template <class Pat> inline vector_bool asc_create_mask_b16(Pat pat) { return dj_twin::vreg::make_mask(int(pat), 2); }
template <class Pat> inline vector_bool asc_create_mask_b32(Pat pat) { return dj_twin::vreg::make_mask(int(pat), 4); }

inline vector_bool asc_update_mask_b8(uint32_t& value) { return dj_twin::vreg::update_mask(value, 1); }
inline vector_bool asc_update_mask_b16(uint32_t& value) { return dj_twin::vreg::update_mask(value, 2); }
inline vector_bool asc_update_mask_b32(uint32_t& value) { return dj_twin::vreg::update_mask(value, 4); }

inline void asc_and(vector_bool& dst, vector_bool a, vector_bool b, vector_bool m) {
  dst = dj_twin::vreg::mask_bitwise(a, b, m, [](unsigned x, unsigned y) { return x & y; });
}
inline void asc_or(vector_bool& dst, vector_bool a, vector_bool b, vector_bool m) {
  dst = dj_twin::vreg::mask_bitwise(a, b, m, [](unsigned x, unsigned y) { return x | y; });
}
inline void asc_xor(vector_bool& dst, vector_bool a, vector_bool b, vector_bool m) {
  dst = dj_twin::vreg::mask_bitwise(a, b, m, [](unsigned x, unsigned y) { return x ^ y; });
}
inline void asc_not(vector_bool& dst, vector_bool a, vector_bool m) {
  dst = dj_twin::vreg::mask_bitwise(a, a, m, [](unsigned x, unsigned) { return ~x; });
}
// dst bit = m ? a : b (asc_select on masks).
inline void asc_select(vector_bool& dst, vector_bool a, vector_bool b, vector_bool m) {
  for (int i = 0; i < dj_twin::vreg::VL / 8; ++i) dst.b[i] = uint8_t((a.b[i] & m.b[i]) | (b.b[i] & ~m.b[i]));
}

inline void asc_intlv_b8(vector_bool& d0, vector_bool& d1, vector_bool a, vector_bool b) { dj_twin::vreg::mask_intlv(d0, d1, a, b, 1); }
inline void asc_intlv_b16(vector_bool& d0, vector_bool& d1, vector_bool a, vector_bool b) { dj_twin::vreg::mask_intlv(d0, d1, a, b, 2); }
inline void asc_intlv_b32(vector_bool& d0, vector_bool& d1, vector_bool a, vector_bool b) { dj_twin::vreg::mask_intlv(d0, d1, a, b, 4); }
inline void asc_deintlv_b8(vector_bool& d0, vector_bool& d1, vector_bool a, vector_bool b) { dj_twin::vreg::mask_deintlv(d0, d1, a, b, 1); }
inline void asc_deintlv_b16(vector_bool& d0, vector_bool& d1, vector_bool a, vector_bool b) { dj_twin::vreg::mask_deintlv(d0, d1, a, b, 2); }
inline void asc_deintlv_b32(vector_bool& d0, vector_bool& d1, vector_bool a, vector_bool b) { dj_twin::vreg::mask_deintlv(d0, d1, a, b, 4); }

// Mask pack/unpack (ppack/punpack): pack keeps every other bit of the register, placing the 128 result
// bits in the low (to_low) or high (to_high) half and zeroing the other half; unpack spreads one half's
// 128 bits to every other bit position (the widening a b8->b16 mask conversion needs).
inline void asc_pack_to_low(vector_bool& dst, vector_bool src) {
  vector_bool d;
  for (int i = 0; i < 128; ++i) d.set(i, src.bit(2 * i));
  dst = d;
}
inline void asc_pack_to_high(vector_bool& dst, vector_bool src) {
  vector_bool d;
  for (int i = 0; i < 128; ++i) d.set(128 + i, src.bit(2 * i));
  dst = d;
}
inline void asc_unpack_lower(vector_bool& dst, vector_bool src) {
  vector_bool d;
  for (int i = 0; i < 128; ++i) d.set(2 * i, src.bit(i));
  dst = d;
}
inline void asc_unpack_upper(vector_bool& dst, vector_bool src) {
  vector_bool d;
  for (int i = 0; i < 128; ++i) d.set(2 * i, src.bit(128 + i));
  dst = d;
}

// Mask loads/stores. The UB offset of a mask access is in bytes. NORM moves all 32 bytes; US loads 16
// bytes and repeats each bit twice; DS loads 64 bytes and keeps every other bit; PK stores every other
// bit as 16 bytes.
template <class P> inline void asc_loadalign(vector_bool& dst, __ubuf__ P* src, int32_t offset = 0) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(src) + offset;
  dj_twin::check(dj_twin::Mem::UB, p, 32, "asc_loadalign(mask)");
  std::memcpy(dst.b, p, 32);
}
template <class P> inline void asc_loadalign_upsample(vector_bool& dst, __ubuf__ P* src, int32_t offset = 0) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(src) + offset;
  dj_twin::check(dj_twin::Mem::UB, p, 16, "asc_loadalign_upsample(mask)");
  vector_bool d;
  for (int i = 0; i < 128; ++i) {
    const bool v = (p[i >> 3] >> (i & 7)) & 1;
    d.set(2 * i, v);
    d.set(2 * i + 1, v);
  }
  dst = d;
}
template <class P> inline void asc_loadalign_downsample(vector_bool& dst, __ubuf__ P* src, int32_t offset = 0) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(src) + offset;
  dj_twin::check(dj_twin::Mem::UB, p, 64, "asc_loadalign_downsample(mask)");
  vector_bool d;
  for (int i = 0; i < 256; ++i) d.set(i, (p[(2 * i) >> 3] >> ((2 * i) & 7)) & 1);
  dst = d;
}
template <class P> inline void asc_storealign(__ubuf__ P* dst, vector_bool src, int32_t offset = 0) {
  uint8_t* p = reinterpret_cast<uint8_t*>(dst) + offset;
  dj_twin::check(dj_twin::Mem::UB, p, 32, "asc_storealign(mask)");
  std::memcpy(p, src.b, 32);
}
template <class P> inline void asc_storealign_pack(__ubuf__ P* dst, vector_bool src, int32_t offset = 0) {
  uint8_t* p = reinterpret_cast<uint8_t*>(dst) + offset;
  dj_twin::check(dj_twin::Mem::UB, p, 16, "asc_storealign_pack(mask)");
  uint8_t out[16] = {};
  for (int i = 0; i < 128; ++i) out[i >> 3] |= uint8_t(src.bit(2 * i) << (i & 7));
  std::memcpy(p, out, 16);
}
