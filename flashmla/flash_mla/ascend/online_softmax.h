// flash_mla/ascend/online_softmax.h — the vector cores' online softmax, shared by sparse_mla.asc and
// dense_attn.asc: one step over a tile of kTile logits per row, and the final normalisation, all SIMD
// register code (__simd_vf__) over Unified Buffer pointers (the kernels own the UB maps).
//
// A step's logits s are FP32, row-major, kTile per row (one 64-lane register a row), for `Rows` rows. Which
// tokens count for row r (`Live`): a tile-wide validity (sparse: one int32 a token) and / or a per-row limit
// (dense: key p0 + t counts iff it is < lim[r]); the others get probability 0. A step is four calls (a call
// boundary orders one call's UB stores before the next one's loads), over scratch `part` (kPartFloats
// floats: kPartMax the rows' step maxima, kPartNan 1 where a counted logit is NaN, kPartSum the rows' sums,
// kPartRef the exponents' references):
//   softmax_max_vf:  per row, the step's max of the counted logits and its NaN flag (unscaled, or negated
//                    for a negative scale: rounding is monotone, so |scale| times it is the max of the scaled
//                    logits exactly);
//   softmax_stat_vf: every row at once (one lane a row): the step's scaled max, the step's reference max m (the
//                    old one unless the step's max passes it by more than `skip`, natural-log units:
//                    probabilities stay <= e^skip and the accumulator's factor is exactly 1 on such steps), the
//                    factor alpha of what was accumulated against the old m, the true running max `top`
//                    (optional), and the exponent reference kPartRef: m, or 0 where m is -inf (no counted
//                    logit above -inf: exp(x - 0) is then 0 for every counted x, where exp(x - m) would be NaN);
//   softmax_exp_vf:  per row, the probabilities exp(x - ref) rounded to Elem (BF16 or FP16) in the NZ order of the
//                    cube's A operand for these rows, p[(t / 16) * Rows * 16 + r * 16 + t % 16], and their sum;
//   softmax_sum_vf:  every row at once: l = l * alpha + sum (l relative to m).
// The docs leave the NaN result of the register max and reduce-max open (the twin can run either way,
// DJ_TWIN_MAX_DROPS_NAN), so NaN is carried by an explicit flag and selects: a NaN logit makes its row's m,
// top, l, lse and out NaN, as the reference's torch max and exp do.
#pragma once

#include <c_api/asc_simd.h>

namespace fmla_softmax {

constexpr uint32_t kTile = 64;  // logits a row per step: one FP32 register

// The reference max of the online softmax moves only when a step's max exceeds it by more than this
// (natural-log units; FMLA_RESCALE_SKIP, 0 = always move): probabilities stay <= e^skip in FP32 / BF16 (no
// precision lost, BF16 is relative), and the accumulator's factor is exactly 1 on such steps.
#ifndef FMLA_RESCALE_SKIP
#define FMLA_RESCALE_SKIP 8
#endif
constexpr float kRescaleSkip = float(FMLA_RESCALE_SKIP);
constexpr uint32_t kPartMax = 0, kPartNan = 64, kPartSum = 128, kPartRef = 192, kPartFloats = 256;
constexpr uint32_t kKeepOffset = 64;  // finish_rows_vf: floats from the factors to the keep flags

__aicore__ inline float from_bits(uint32_t b) {
  union {
    uint32_t u;
    float f;
  } v{b};
  return v.f;
}
__aicore__ inline float minus_inf() { return from_bits(0xFF800000u); }
__aicore__ inline float plus_inf() { return from_bits(0x7F800000u); }

// The counted tokens: valid (int32 a token, nonzero = counts; null: all) and lim (int32 a row: key p0 + t
// counts iff p0 + t < lim[r]; null: no limit).
struct Live {
  __ubuf__ int32_t* valid;
  __ubuf__ int32_t* lim;
  int32_t p0;
};

// The lanes the tile-wide validity keeps (all without one).
__simd_callee__ inline vector_bool tile_lanes(const Live& live, vector_bool all) {
  if (!live.valid) return all;
  vector_int32_t v;
  asc_loadalign(v, live.valid);
  vector_bool lanes;
  asc_ne_scalar(lanes, v, 0, all);
  return lanes;
}

// Row r's counted lanes: the tile's, and where a limit is given, those with key index (`keys`: p0 + lane)
// below lim[r].
__simd_callee__ inline vector_bool row_lanes(const Live& live, vector_bool tile, vector_int32_t keys, uint32_t r,
                                             vector_bool all) {
  if (!live.lim) return tile;
  vector_int32_t limit;
  asc_loadalign_brc_elem(limit, live.lim, int32_t(r));
  vector_bool below;
  asc_lt(below, keys, limit, all);
  asc_and(below, below, tile, all);
  return below;
}

// d = the NaN-keeping max of a and b on the lanes of m.
__simd_callee__ inline void nan_max_regs(vector_float& d, vector_float a, vector_float b, vector_bool m) {
  vector_bool a_nan, b_nan;
  asc_ne(a_nan, a, a, m);
  asc_ne(b_nan, b, b, m);
  vector_float mx;
  asc_max(mx, a, b, m);
  asc_select(mx, b, mx, b_nan);
  asc_select(d, a, mx, a_nan);
}

template <uint32_t Rows>
__simd_vf__ inline void softmax_max_vf(__ubuf__ float* s, Live live, __ubuf__ float* part, float scale) {
  static_assert(Rows <= 64, "one lane a row in softmax_stat_vf");
  const vector_bool all = asc_create_mask_b32(PAT_ALL);
  const vector_bool tile = tile_lanes(live, all);
  vector_int32_t keys;
  asc_arange(keys, live.p0);
  vector_float lowest, one, zero;
  asc_duplicate_scalar(lowest, minus_inf(), all);
  asc_duplicate_scalar(one, 1.0f, all);
  asc_duplicate_scalar(zero, 0.0f, all);
  for (uint32_t r = 0; r < Rows; ++r) {
    const vector_bool counted = row_lanes(live, tile, keys, r, all);
    vector_float x, mx, flag;
    asc_loadalign(x, s + r * kTile);
    if (scale < 0.0f) asc_muls(x, x, -1.0f, all);
    vector_bool nan;
    asc_ne(nan, x, x, counted);  // only counted lanes can be true
    asc_select(x, x, lowest, counted);
    asc_reduce_max(mx, x, all);
    asc_select(flag, one, zero, nan);
    asc_reduce_max(flag, flag, all);
    asc_storealign_1st(part + kPartMax + r, mx);
    asc_storealign_1st(part + kPartNan + r, flag);
  }
}

// top: the rows' running max of every counted logit (null: not kept).
template <uint32_t Rows>
__simd_vf__ inline void softmax_stat_vf(__ubuf__ float* part, __ubuf__ float* m, __ubuf__ float* alpha,
                                        __ubuf__ float* top, float skip, float scale) {
  uint32_t rows = Rows;
  const vector_bool lanes = asc_update_mask_b32(rows);
  vector_float m_old, mx, flag, nan, one;
  asc_loadalign(m_old, m);
  asc_loadalign(mx, part + kPartMax);
  asc_muls(mx, mx, scale < 0.0f ? -scale : scale, lanes);
  asc_loadalign(flag, part + kPartNan);
  asc_duplicate_scalar(nan, from_bits(0x7FC00000u), lanes);
  asc_duplicate_scalar(one, 1.0f, lanes);
  vector_bool has_nan;
  asc_ne_scalar(has_nan, flag, 0.0f, lanes);
  asc_select(mx, nan, mx, has_nan);
  if (top) {
    vector_float running;
    asc_loadalign(running, top);
    nan_max_regs(running, running, mx, lanes);
    asc_storealign(top, running, lanes);
  }
  // the old reference stays while mx <= m_old + skip (false for a NaN; from m_old -inf only an mx of -inf
  // stays, which the max would give too)
  vector_float moved, limit, m_new;
  nan_max_regs(moved, m_old, mx, lanes);
  asc_add_scalar(limit, m_old, skip, lanes);
  vector_bool stays;
  asc_le(stays, mx, limit, lanes);
  asc_select(m_new, m_old, moved, stays);
  // alpha = exp(m_old - m_new), exactly 1 where m did not move (0 from m_old -inf to a larger m: nothing was
  // accumulated yet)
  vector_float a;
  asc_exp_sub(a, m_old, m_new, lanes);
  vector_bool same;
  asc_eq(same, m_new, m_old, lanes);
  asc_select(a, one, a, same);
  asc_storealign(m, m_new, lanes);
  asc_storealign(alpha, a, lanes);
  vector_bool lowest;
  asc_eq_scalar(lowest, m_new, minus_inf(), lanes);
  vector_float zero;
  asc_duplicate_scalar(zero, 0.0f, lanes);
  asc_select(m_new, zero, m_new, lowest);
  asc_storealign(part + kPartRef, m_new, lanes);
}

// 64 FP32 lanes rounded to Elem (nearest even) into the low 64 16-bit lanes of `packed`: the conversion writes
// the even elements, the pack keeps each 32-bit lane's low half.
__simd_callee__ inline void round_to_elem(vector_uint16_t& packed, vector_float x, vector_bool all, bfloat16_t) {
  vector_bfloat16_t rounded;
  asc_float2bfloat16_rn(rounded, x, all);
  asc_pack_to_low(packed, (vector_uint32_t&)rounded);
}
__simd_callee__ inline void round_to_elem(vector_uint16_t& packed, vector_float x, vector_bool all, half) {
  vector_half rounded;
  asc_float2half_rn(rounded, x, all);
  asc_pack_to_low(packed, (vector_uint32_t&)rounded);
}

template <uint32_t Rows, class Elem>
__simd_vf__ inline void softmax_exp_vf(__ubuf__ float* s, Live live, __ubuf__ Elem* p, __ubuf__ float* part,
                                       float scale) {
  const vector_bool all = asc_create_mask_b32(PAT_ALL);
  const vector_bool tile = tile_lanes(live, all);
  vector_int32_t keys;
  asc_arange(keys, live.p0);
  uint32_t width = kTile;
  const vector_bool row16 = asc_update_mask_b16(width);  // a row's 64 16-bit lanes
  vector_float zero;
  asc_duplicate_scalar(zero, 0.0f, all);
  for (uint32_t r = 0; r < Rows; ++r) {
    const vector_bool counted = row_lanes(live, tile, keys, r, all);
    vector_float x, ref, e, sum;
    asc_loadalign(x, s + r * kTile);
    asc_muls(x, x, scale, all);
    asc_loadalign_brc_elem(ref, part + kPartRef, int32_t(r));
    asc_exp_sub(e, x, ref, all);
    asc_select(e, e, zero, counted);
    asc_reduce_sum(sum, e, all);
    asc_storealign_1st(part + kPartSum + r, sum);
    // one 16-token column block of the NZ tile every Rows blocks
    vector_uint16_t packed;
    round_to_elem(packed, e, all, Elem{});
    asc_storealign((__ubuf__ uint16_t*)p + r * 16, packed, uint16_t(Rows), uint16_t(0), row16);
  }
}

template <uint32_t Rows>
__simd_vf__ inline void softmax_sum_vf(__ubuf__ float* part, __ubuf__ float* l, __ubuf__ float* alpha) {
  uint32_t rows = Rows;
  const vector_bool lanes = asc_update_mask_b32(rows);
  vector_float lv, a, sum;
  asc_loadalign(lv, l);
  asc_loadalign(a, alpha);
  asc_loadalign(sum, part + kPartSum);
  asc_mul(lv, lv, a, lanes);
  asc_add(lv, lv, sum, lanes);
  asc_storealign(l, lv, lanes);
}

// The outputs, in two passes. finish_rows_vf, every row at once (one lane a row): lse = m + log(l) (m the
// reference max l is relative to), +inf for an empty row (l 0: nothing counted, or only -inf logits; its m stays
// -inf) or with a +inf logit (m +inf, l NaN); the row's output factor f = 1 / l, divided by 1 + exp(sink - lse)
// where a sink is given (null: none); and its keep flag (factor + kKeepOffset), 0 for an empty row.
// finish_out_vf: out = (acc + o) * f rounded to Elem, Cols columns a row (acc or o null: the other alone), 0
// where keep is 0 (an empty row's sum may hold 0 x inf = NaN from P . V over -inf V rows; its out is 0 as the
// reference's). out may overlay o (its rows in place: an out row is stored after the o rows it covers are read).
template <uint32_t Rows>
__simd_vf__ inline void finish_rows_vf(__ubuf__ float* m, __ubuf__ float* l, __ubuf__ float* sink, __ubuf__ float* lse,
                                       __ubuf__ float* factor) {
  static_assert(Rows <= kKeepOffset, "finish_rows_vf: one lane a row, the flags behind the factors");
  uint32_t rows = Rows;
  const vector_bool lanes = asc_update_mask_b32(rows);
  vector_float mv, lv, row_lse, f, inf, one, zero;
  asc_loadalign(mv, m);
  asc_loadalign(lv, l);
  asc_duplicate_scalar(inf, plus_inf(), lanes);
  asc_duplicate_scalar(one, 1.0f, lanes);
  asc_duplicate_scalar(zero, 0.0f, lanes);
  vector_bool empty, m_inf;
  asc_eq_scalar(empty, lv, 0.0f, lanes);
  asc_eq_scalar(m_inf, mv, plus_inf(), lanes);
  asc_ln(row_lse, lv, lanes);
  asc_add(row_lse, row_lse, mv, lanes);
  asc_select(row_lse, inf, row_lse, empty);
  asc_select(row_lse, inf, row_lse, m_inf);
  asc_div(f, one, lv, lanes);
  if (sink) {
    vector_float sv, d;
    asc_loadalign(sv, sink);
    asc_sub(d, sv, row_lse, lanes);
    asc_exp(d, d, lanes);
    asc_add(d, d, one, lanes);
    asc_div(f, f, d, lanes);
  }
  vector_float keep;
  asc_select(keep, zero, one, empty);
  asc_storealign(lse, row_lse, lanes);
  asc_storealign(factor, f, lanes);
  asc_storealign(factor + kKeepOffset, keep, lanes);
}

template <uint32_t Rows, uint32_t Cols, class Elem>
__simd_vf__ inline void finish_out_vf(__ubuf__ float* acc, __ubuf__ float* o, __ubuf__ float* factor,
                                      __ubuf__ Elem* out) {
  static_assert(Cols % 64 == 0, "finish_out_vf: 64 columns a register");
  const vector_bool all = asc_create_mask_b32(PAT_ALL);
  uint32_t width = 64;
  const vector_bool half16 = asc_update_mask_b16(width);  // the packed 64 16-bit lanes
  vector_float zero;
  asc_duplicate_scalar(zero, 0.0f, all);
  constexpr uint32_t kRegs = Cols / 64;
  for (uint32_t r = 0; r < Rows; ++r) {
    vector_float f, keep;
    asc_loadalign_brc_elem(f, factor, int32_t(r));
    asc_loadalign_brc_elem(keep, factor, int32_t(kKeepOffset + r));
    vector_bool empty;
    asc_eq_scalar(empty, keep, 0.0f, all);
    vector_float x[kRegs];
    for (uint32_t k = 0; k < kRegs; ++k) {
      asc_loadalign(x[k], acc ? acc + r * Cols + 64 * k : o + r * Cols + 64 * k);
      if (acc && o) {
        vector_float y;
        asc_loadalign(y, o + r * Cols + 64 * k);
        asc_add(x[k], x[k], y, all);
      }
    }
    // out row r may overlay o rows <= r (their bytes all loaded by now); overlapping UB accesses in one
    // vector function are ordered only by a memory barrier (asc-devkit reg load / store: asc_mem_bar)
    if (o) asc_mem_bar(VLD_VST);
    for (uint32_t k = 0; k < kRegs; ++k) {
      asc_mul(x[k], x[k], f, all);
      asc_select(x[k], zero, x[k], empty);
      vector_uint16_t packed;
      round_to_elem(packed, x[k], all, Elem{});
      asc_storealign((__ubuf__ uint16_t*)out + r * Cols + 64 * k, packed, half16);
    }
  }
}

}  // namespace fmla_softmax
