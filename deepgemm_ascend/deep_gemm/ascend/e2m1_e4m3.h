// deep_gemm/ascend/e2m1_e4m3.h — packed FP4 (E2M1, two per byte, low nibble first) to E4M3 in vector
// registers, exactly (every E2M1 value is an E4M3 value), by a register lookup table over the 16 codes:
// a byte k of the input in 16-bit lane k becomes, in the same lane, E4M3(low nibble) | E4M3(high nibble)
// << 8, i.e. the two E4M3 bytes in input order (little endian). Shared by fp4_to_fp8.asc and
// fp8_fp4_mx_gemm.asc (their former SIMT e2m1_to_e4m3 mapped code by code the same way).
#pragma once

#include <c_api/asc_simd.h>

namespace dg_ascend {

// Lane i of `lo` holds the E4M3 code of E2M1 code i % 16, `hi` the same shifted left by 8: 0 -> 0,
// 0.5 -> 0x30 (2^-1), otherwise exponent (c >> 1) and mantissa bit c & 1 rebiased from 1 to 7, i.e.
// (magnitude << 2) + 0x30; the sign moves from bit 3 to bit 7.
struct E2m1Table {
  vector_uint16_t lo, hi, nibble;  // nibble: 0xF in every lane
};

__simd_callee__ inline void e2m1_table(E2m1Table& t, vector_bool all) {
  vector_int16_t lane;
  asc_arange(lane, int16_t(0));
  vector_uint16_t code, mag, sign, e, seven, eight, zero, half;
  asc_duplicate_scalar(t.nibble, uint16_t(0xF), all);
  asc_duplicate_scalar(seven, uint16_t(7), all);
  asc_duplicate_scalar(eight, uint16_t(8), all);
  asc_duplicate_scalar(zero, uint16_t(0), all);
  asc_duplicate_scalar(half, uint16_t(0x30), all);
  asc_and(code, (vector_uint16_t&)lane, t.nibble, all);
  asc_and(mag, code, seven, all);
  asc_shiftleft_scalar(e, mag, int16_t(2), all);
  asc_add_scalar(e, e, uint16_t(0x30), all);
  vector_bool is0, is1;
  asc_eq_scalar(is0, mag, uint16_t(0), all);
  asc_eq_scalar(is1, mag, uint16_t(1), all);
  asc_select(e, zero, e, is0);
  asc_select(e, half, e, is1);
  asc_and(sign, code, eight, all);
  asc_shiftleft_scalar(sign, sign, int16_t(4), all);
  asc_or(t.lo, e, sign, all);
  asc_shiftleft_scalar(t.hi, t.lo, int16_t(8), all);
}

// bytes: input byte k zero-extended in 16-bit lane k (an UNPACK load of uint8); out: its two E4M3 codes.
__simd_callee__ inline void e2m1_widen(vector_uint16_t& out, vector_uint16_t bytes, const E2m1Table& t,
                                       vector_bool all) {
  vector_uint16_t low, high;
  asc_and(low, bytes, t.nibble, all);
  asc_shiftright_scalar(high, bytes, int16_t(4), all);
  asc_gather(low, t.lo, low);
  asc_gather(high, t.hi, high);
  asc_or(out, low, high, all);
}

}  // namespace dg_ascend
