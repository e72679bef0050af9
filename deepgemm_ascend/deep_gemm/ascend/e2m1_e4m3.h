// deep_gemm/ascend/e2m1_e4m3.h — packed FP4 (E2M1, two per byte, low nibble first) to E4M3 in vector
// registers, exactly (every E2M1 value is an E4M3 value), by a register lookup table over the 16 codes:
// a byte k of the input in 16-bit lane k becomes, in the same lane, E4M3(low nibble) | E4M3(high nibble)
// << 8, i.e. the two E4M3 bytes in input order (little endian). Shared by fp4_to_fp8.asc and
// fp4_l1_widen.h (the FP8 x FP4 GEMMs' vector cores).
#pragma once

#include <c_api/asc_simd.h>

namespace dg_ascend {

// Byte lane i of `codes` holds the E4M3 code of E2M1 code i % 16 (all 256 byte lanes, so an index whose
// upper nibble is not zero still finds its code): 0 -> 0, 0.5 -> 0x30 (2^-1), otherwise exponent (c >> 1)
// and mantissa bit c & 1 rebiased from 1 to 7, i.e. (magnitude << 2) + 0x30; the sign moves from bit 3
// to bit 7.
struct E2m1Table {
  vector_uint8_t codes;
};

// The E4M3 codes of the E2M1 codes (0..15) in the 16-bit lanes of `code`. kDiv64: the codes of value / 64
// instead, for an operand whose scale bytes carry +6 (DeepGEMM-Ascend's FP4 weights): magnitude code m gives
// m << 2 exactly (0.5 / 64 = 2^-7 is the E4M3 subnormal 0x04, 6 / 64 = 1.5 * 2^-4 is 0x1C).
template <bool kDiv64 = false>
__simd_callee__ inline void e2m1_to_e4m3_codes(vector_uint16_t& out, vector_uint16_t code, vector_bool all) {
  vector_uint16_t mag, sign, e, seven, eight;
  asc_duplicate_scalar(seven, uint16_t(7), all);
  asc_duplicate_scalar(eight, uint16_t(8), all);
  asc_and(mag, code, seven, all);
  asc_shiftleft_scalar(e, mag, int16_t(2), all);
  if constexpr (!kDiv64) {
    vector_uint16_t zero, half;
    asc_duplicate_scalar(zero, uint16_t(0), all);
    asc_duplicate_scalar(half, uint16_t(0x30), all);
    asc_add_scalar(e, e, uint16_t(0x30), all);
    vector_bool is0, is1;
    asc_eq_scalar(is0, mag, uint16_t(0), all);
    asc_eq_scalar(is1, mag, uint16_t(1), all);
    asc_select(e, zero, e, is0);
    asc_select(e, half, e, is1);
  }
  asc_and(sign, code, eight, all);
  asc_shiftleft_scalar(sign, sign, int16_t(4), all);
  asc_or(out, e, sign, all);
}

template <bool kDiv64 = false>
__simd_callee__ inline void e2m1_table(E2m1Table& t, vector_bool all) {
  // 16-bit lane j holds byte lanes 2j and 2j + 1: the codes of E2M1 codes 2j % 16 and (2j + 1) % 16
  vector_int16_t lane;
  asc_arange(lane, int16_t(0));
  vector_uint16_t nibble, even, odd, lo, hi;
  asc_duplicate_scalar(nibble, uint16_t(0xF), all);
  asc_shiftleft_scalar(even, (vector_uint16_t&)lane, int16_t(1), all);
  asc_add_scalar(odd, even, uint16_t(1), all);
  asc_and(even, even, nibble, all);
  asc_and(odd, odd, nibble, all);
  e2m1_to_e4m3_codes<kDiv64>(lo, even, all);
  e2m1_to_e4m3_codes<kDiv64>(hi, odd, all);
  asc_shiftleft_scalar(hi, hi, int16_t(8), all);
  asc_or((vector_uint16_t&)t.codes, lo, hi, all);
}

// bytes: input byte b = (high << 4) | low zero-extended in 16-bit lane k (an UNPACK load of uint8); out: its
// two E4M3 codes. b | b << 4 has low in the low byte's low nibble and high in the high byte (the rest of the
// low byte is masked by the table's period of 16), so one byte-lane gather looks both up.
__simd_callee__ inline void e2m1_widen(vector_uint16_t& out, vector_uint16_t bytes, const E2m1Table& t,
                                       vector_bool all) {
  vector_uint16_t index;
  asc_shiftleft_scalar(index, bytes, int16_t(4), all);
  asc_or(index, index, bytes, all);
  asc_gather((vector_uint8_t&)out, t.codes, (vector_uint8_t&)index);
}

}  // namespace dg_ascend
