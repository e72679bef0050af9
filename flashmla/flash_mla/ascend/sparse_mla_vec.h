// flash_mla/ascend/sparse_mla_vec.h — the vector-core pieces of sparse_mla.asc: token dequantisation
// into BF16 rows (SIMT, an asc_vf_call region), the zeroing of an invalid token's BF16 row, the online-softmax
// step, the accumulator fold and the final normalisation (SIMD), over Unified Buffer pointers (no on-chip base
// literals here: sparse_mla.asc owns the UB map).
//
// Token formats (the FormatSpec codes of _operands.py, records in [data | scales] order; a
// block-split record is gathered into that order): 0 = V3.2 (656 B: 512 e4m3, 4 fp32 scales one per
// 128 dims, 64 bf16 RoPE dims), 1 = MODEL1 (584 B: 448 e4m3, 64 bf16 RoPE dims, 7 e8m0 scales one per
// 64 dims + 1 pad byte), 2 = V4.1 FP8 (528 B: 512 e4m3, 16 e8m0 scales, one per 32 dims), 3 = V4.1
// FP4 (288 B: 512 e2m1 two per byte, low nibble first, 32 e4m3 scales, one per 16 dims), 4 = BF16
// row (prefill's kv, kDqk * 2 B). Quantised values decode exactly to FP32, are multiplied by their
// scale in FP32 and rounded once to BF16, as kv_cache.dequantize_records does; a NaN (RoPE dims
// included) becomes 0 as in the reference's gather (BF16 rows are taken as they are, as the prefill
// reference does).
#pragma once

#include <simt_api/asc_simt.h>
#include <simt_api/asc_bf16.h>

// The twin's timeline sees a SIMT lane's plain arithmetic, math functions and UB reads only as the kernel
// declares them (deepjit simt_api/asc_simt.h); elsewhere the declaration is nothing. The counts below are
// per lane and by hand from this source (an estimate of what the compiler keeps: a division or modulo by a
// constant as 2 instructions, expf as 15).
#ifndef DJ_SIMT_WORK
#define DJ_SIMT_WORK(alu, ub_loads, ub_stores) ((void)0)
#endif

#ifndef FMLA_HG
#define FMLA_HG 64
#endif

namespace fmla_ascend {

#ifndef FMLA_DQK
#define FMLA_DQK 512
#endif

constexpr uint32_t kD = 512;                 // d_v (every format)
constexpr uint32_t kDqk = FMLA_DQK;          // d_qk: 512, or 576 (V3.2 and 576-dim prefill)
constexpr uint32_t kTile = 64;               // tokens per step (QK tile width, PV depth)
constexpr uint32_t kTileHalf = kTile / 2;    // tokens each vector core gathers
constexpr uint32_t kHg = FMLA_HG;            // heads per cube block
constexpr uint32_t kRows = kHg / 2;          // heads per vector core (FixPipe SPLIT_M)
constexpr uint32_t kRawSlot = kDqk * 2;      // UB bytes per gathered record (the largest: a BF16 row)
constexpr int32_t kFmtV32 = 0, kFmtModel1 = 1, kFmtFp8 = 2, kFmtFp4 = 3, kFmtBf16 = 4;

static_assert(kHg % 16 == 0 && kHg <= 64, "heads per block: a multiple of 16, at most 64");
static_assert(kDqk == 512 || kDqk == 576, "d_qk: 512 or 576");

__aicore__ inline uint32_t record_bytes(int32_t fmt) {
  return fmt == kFmtV32 ? 656u : fmt == kFmtModel1 ? 584u : fmt == kFmtFp8 ? 528u : fmt == kFmtFp4 ? 288u : kDqk * 2;
}

// Bytes of a record's data part (the rest are its scales; a block-split block stores the two apart).
__aicore__ inline uint32_t data_bytes(int32_t fmt) {
  return fmt == kFmtModel1 ? 576u : fmt == kFmtFp8 ? 512u : fmt == kFmtFp4 ? 256u : record_bytes(fmt);
}

__aicore__ inline float bits_to_float(uint32_t b) {
  union {
    uint32_t u;
    float f;
  } v{b};
  return v.f;
}

// E4M3FN (bias 7, no inf, S.1111.111 = NaN) to FP32, exactly.
__aicore__ inline float e4m3_value(uint32_t b) {
  const uint32_t s = (b >> 7) & 1u, e = (b >> 3) & 15u, m = b & 7u;
  float v;
  if (e == 15u && m == 7u) v = bits_to_float(0x7FC00000u);
  else if (e == 0u) v = float(m) * (1.0f / 512.0f);
  else v = bits_to_float(((e + 120u) << 23) | (m << 20));
  return s ? -v : v;
}

// E8M0 (2^(b - 127), 0xFF = NaN) to FP32.
__aicore__ inline float e8m0_value(uint32_t b) {
  if (b == 255u) return bits_to_float(0x7FC00000u);
  if (b == 0u) return bits_to_float(0x00400000u);  // 2^-127, a subnormal
  return bits_to_float(b << 23);
}

// Little-endian BF16 / FP32 at r.
__aicore__ inline float bf16_at(const __ubuf__ uint8_t* r) {
  return bits_to_float((uint32_t(r[0]) | (uint32_t(r[1]) << 8)) << 16);
}
__aicore__ inline float f32_at(const __ubuf__ uint8_t* r) {
  return bits_to_float(uint32_t(r[0]) | (uint32_t(r[1]) << 8) | (uint32_t(r[2]) << 16) | (uint32_t(r[3]) << 24));
}

// E2M1 code (bit 3 = sign) to FP32.
__aicore__ inline float e2m1_value(uint32_t c) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = mag[c & 7u];
  return (c & 8u) ? -v : v;
}

// A dequantised element's lane work by format (ALU, UB loads), besides its loop, index arithmetic, valid[]
// load, format compares, BF16 rounding and store: the decoders above (e4m3_value ~12, e8m0_value ~3,
// bf16_at / f32_at 3 / 6 after their 2 / 4 byte loads, e2m1_value ~6 with its table load).
__aicore__ inline uint32_t dequant_alu(int32_t fmt) {
  return fmt == kFmtFp8 ? 18u : fmt == kFmtFp4 ? 22u : fmt == kFmtV32 ? 22u : 19u;
}
__aicore__ inline uint32_t dequant_loads(int32_t fmt) {
  return fmt == kFmtFp8 ? 2u : fmt == kFmtFp4 ? 3u : fmt == kFmtV32 ? 5u : 2u;
}

// Dims [0, kDqk) of `count` gathered quantised records (raw + t * kRawSlot) as BF16 rows of kDqk
// (k + t * kDqk); a token with valid[t] == 0 becomes a zero row (its record was not loaded). BF16 records
// need no pass (sparse_mla.asc gather_finish).
__simt_vf__ __launch_bounds__(512) inline void dequant_vf(__ubuf__ uint8_t* raw, __ubuf__ bfloat16_t* k,
                                                          __ubuf__ int32_t* valid, uint32_t count, int32_t fmt) {
  for (uint32_t i = threadIdx.x; i < count * kDqk; i += blockDim.x) {
    // loop 2, t and d 4, the record address 2, the valid branch 1, format compares 2, rounding 1, the
    // store's address 1; UB: valid[t], one store
    DJ_SIMT_WORK(13 + dequant_alu(fmt), 1 + dequant_loads(fmt), 1);
    const uint32_t t = i / kDqk, d = i % kDqk;
    const __ubuf__ uint8_t* r = raw + t * kRawSlot;
    float v = 0.0f;
    if (valid[t]) {
      if (fmt == kFmtFp8) {
        v = e4m3_value(r[d]) * e8m0_value(r[512 + d / 32]);
      } else if (fmt == kFmtFp4) {
        const uint32_t byte = r[d / 2];
        v = e2m1_value((d & 1u) ? byte >> 4 : byte & 15u) * e4m3_value(r[256 + d / 16]);
      } else if (fmt == kFmtV32) {
        v = d < 512 ? e4m3_value(r[d]) * f32_at(r + 512 + 4 * (d / 128)) : bf16_at(r + 528 + 2 * (d - 512));
      } else {  // MODEL1
        v = d < 448 ? e4m3_value(r[d]) * e8m0_value(r[576 + d / 64]) : bf16_at(r + 448 + 2 * (d - 448));
      }
      if (v != v) v = 0.0f;
    }
    k[i] = __float2bfloat16_rn(v);
  }
}

// A BF16 row of kDqk zeros (an invalid token's K / V row: its probability is 0, and 0 x stale data could be
// NaN), by SIMD stores.
__simd_vf__ inline void zero_row_vf(__ubuf__ bfloat16_t* row) {
  const vector_bool all = asc_create_mask_b16(PAT_ALL);
  vector_bfloat16_t zero;
  asc_duplicate_scalar(zero, bfloat16_t(0.0f), all);
  for (uint32_t c = 0; c < kDqk; c += 128) {
    uint32_t n = kDqk - c < 128 ? kDqk - c : 128;
    asc_storealign(row + c, zero, asc_update_mask_b16(n));
  }
}

// The reference max of the online softmax moves only when a step's max exceeds it by more than
// this (natural-log units; FMLA_RESCALE_SKIP, 0 = always move): probabilities stay <= e^8 in FP32 /
// BF16 (no precision lost, BF16 is relative), and the accumulator's factor is exactly 1 on such steps.
#ifndef FMLA_RESCALE_SKIP
#define FMLA_RESCALE_SKIP 8
#endif
constexpr float kRescaleSkip = float(FMLA_RESCALE_SKIP);

// One online-softmax step for this core's kRows heads over a tile of kTile logits (s: FP32, row-major, kTile
// per row, one register a row; invalid tokens get probability 0), by SIMD in four calls (a call boundary
// orders one call's UB stores before the next one's loads). Scratch `part` holds three 64-float slots:
// kPartMax (the rows' step maxima), kPartNan (1 where a valid logit is NaN) and kPartSum (the rows' sums).
//   softmax_max_vf:  per row, the step's max of the scaled valid logits and its NaN flag;
//   softmax_stat_vf: every row at once (one lane a row): the step's reference max m (the old one unless the
//                    step's max passes it by more than kRescaleSkip), the true running max `top` and the
//                    accumulator's factor alpha;
//   softmax_exp_vf:  per row, the BF16 probabilities exp(x - m) in the NZ order of the cube's A operand for
//                    this core's rows, p[(t / 16) * kRows * 16 + r * 16 + t % 16], and their sum;
//   softmax_sum_vf:  every row at once: l = l * alpha + sum (l relative to m).
// The chip's max may drop NaN, so NaN is carried by an explicit flag and selects: a NaN logit makes its row's
// m, top, l, lse and out NaN, as the reference's torch max and exp do.
constexpr uint32_t kPartMax = 0, kPartNan = 64, kPartSum = 128, kPartFloats = 192;
static_assert(kTile == 64, "softmax: one FP32 register (64 lanes) a row of logits");
static_assert(kRows <= 64, "softmax_stat_vf: one lane a row");

__aicore__ inline float neg_inf() { return bits_to_float(0xFF800000u); }

// d = the NaN-keeping max of a and b on the lanes of m (lanes where either is NaN take the NaN).
__simd_callee__ inline void nan_max_regs(vector_float& d, vector_float a, vector_float b, vector_bool m) {
  vector_bool a_nan, b_nan;
  asc_ne(a_nan, a, a, m);
  asc_ne(b_nan, b, b, m);
  vector_float mx;
  asc_max(mx, a, b, m);
  asc_select(mx, b, mx, b_nan);
  asc_select(d, a, mx, a_nan);
}

// The lanes of this step's valid tokens (valid: one int32 a token).
__simd_callee__ inline vector_bool valid_lanes(__ubuf__ int32_t* valid, vector_bool all) {
  vector_int32_t v;
  asc_loadalign(v, valid);
  vector_bool live;
  asc_ne_scalar(live, v, 0, all);
  return live;
}

__simd_vf__ inline void softmax_max_vf(__ubuf__ float* s, __ubuf__ int32_t* valid, __ubuf__ float* part, float scale) {
  const vector_bool all = asc_create_mask_b32(PAT_ALL);
  const vector_bool live = valid_lanes(valid, all);
  vector_float lowest, one, zero;
  asc_duplicate_scalar(lowest, neg_inf(), all);
  asc_duplicate_scalar(one, 1.0f, all);
  asc_duplicate_scalar(zero, 0.0f, all);
  for (uint32_t r = 0; r < kRows; ++r) {
    vector_float x, mx, flag;
    asc_loadalign(x, s + r * kTile);
    asc_muls(x, x, scale, all);
    vector_bool nan;
    asc_ne(nan, x, x, live);  // only valid lanes can be true
    asc_select(x, x, lowest, live);
    asc_reduce_max(mx, x, all);
    asc_select(flag, one, zero, nan);
    asc_reduce_max(flag, flag, all);
    asc_storealign_1st(part + kPartMax + r, mx);
    asc_storealign_1st(part + kPartNan + r, flag);
  }
}

__simd_vf__ inline void softmax_stat_vf(__ubuf__ float* part, __ubuf__ float* m, __ubuf__ float* alpha,
                                        __ubuf__ float* top) {
  uint32_t rows = kRows;
  const vector_bool live = asc_update_mask_b32(rows);
  vector_float m_old, mx, flag, running, nan, one;
  asc_loadalign(m_old, m);
  asc_loadalign(mx, part + kPartMax);
  asc_loadalign(flag, part + kPartNan);
  asc_loadalign(running, top);
  asc_duplicate_scalar(nan, bits_to_float(0x7FC00000u), live);
  asc_duplicate_scalar(one, 1.0f, live);
  vector_bool has_nan;
  asc_ne_scalar(has_nan, flag, 0.0f, live);
  asc_select(mx, nan, mx, has_nan);
  nan_max_regs(running, running, mx, live);
  // the old reference stays while mx <= m_old + kRescaleSkip (false for a NaN; from m_old -inf only an mx of
  // -inf stays, which the max would give too)
  vector_float moved, limit, m_new;
  nan_max_regs(moved, m_old, mx, live);
  asc_add_scalar(limit, m_old, kRescaleSkip, live);
  vector_bool stays;
  asc_le(stays, mx, limit, live);
  asc_select(m_new, m_old, moved, stays);
  // alpha = exp(m_old - m_new), exactly 1 where m did not move (0 from m_old -inf to a larger m: acc and l
  // hold nothing yet)
  vector_float a;
  asc_exp_sub(a, m_old, m_new, live);
  vector_bool same;
  asc_eq(same, m_new, m_old, live);
  asc_select(a, one, a, same);
  asc_storealign(m, m_new, live);
  asc_storealign(alpha, a, live);
  asc_storealign(top, running, live);
}

__simd_vf__ inline void softmax_exp_vf(__ubuf__ float* s, __ubuf__ int32_t* valid, __ubuf__ float* m,
                                       __ubuf__ bfloat16_t* p, __ubuf__ float* part, float scale) {
  const vector_bool all = asc_create_mask_b32(PAT_ALL);
  const vector_bool live = valid_lanes(valid, all);
  uint32_t tile = kTile;
  const vector_bool row_b16 = asc_update_mask_b16(tile);  // the 64 BF16 lanes of a row
  vector_float zero;
  asc_duplicate_scalar(zero, 0.0f, all);
  for (uint32_t r = 0; r < kRows; ++r) {
    vector_float x, ref, e, sum;
    asc_loadalign(x, s + r * kTile);
    asc_muls(x, x, scale, all);
    asc_loadalign_brc_elem(ref, m, int32_t(r));
    asc_exp_sub(e, x, ref, all);
    // a row without a finite reference (m -inf: no valid token, or only -inf logits) has no probabilities
    vector_bool none;
    asc_eq_scalar(none, ref, neg_inf(), all);
    asc_select(e, zero, e, none);
    asc_select(e, e, zero, live);
    asc_reduce_sum(sum, e, all);
    asc_storealign_1st(part + kPartSum + r, sum);
    // BF16 into the even elements, packed to the low 64 lanes, stored one 16-token column block of the NZ
    // tile every kRows blocks
    vector_bfloat16_t rounded;
    asc_float2bfloat16_rn(rounded, e, all);
    vector_uint16_t packed;
    asc_pack_to_low(packed, (vector_uint32_t&)rounded);
    asc_storealign((__ubuf__ uint16_t*)p + r * 16, packed, uint16_t(kRows), uint16_t(0), row_b16);
  }
}

__simd_vf__ inline void softmax_sum_vf(__ubuf__ float* part, __ubuf__ float* l, __ubuf__ float* alpha) {
  uint32_t rows = kRows;
  const vector_bool live = asc_update_mask_b32(rows);
  vector_float lv, a, sum;
  asc_loadalign(lv, l);
  asc_loadalign(a, alpha);
  asc_loadalign(sum, part + kPartSum);
  asc_mul(lv, lv, a, live);
  asc_add(lv, lv, sum, live);
  asc_storealign(l, lv, live);
}

// The accumulator from a drained O (this core's kRows x kD rows of the steps' P.V summed in L0C since
// the last drain), by SIMD: acc = (acc + o) * alpha[row] where a step's reference max moved (`scaled`),
// acc + o after the last step; o alone where acc holds nothing yet (`first`). A factor of 1 leaves the sum
// as it is (x * 1 = x, NaN and inf included).
__simd_vf__ inline void fold_vf(__ubuf__ float* acc, __ubuf__ float* o, __ubuf__ float* alpha, uint32_t first,
                                uint32_t scaled) {
  const vector_bool all = asc_create_mask_b32(PAT_ALL);
  static_assert(kD % 64 == 0, "fold_vf: 64 columns a register");
  for (uint32_t r = 0; r < kRows; ++r) {
    vector_float a;
    if (scaled) asc_loadalign_brc_elem(a, alpha, int32_t(r));
    for (uint32_t c = 0; c < kD; c += 64) {
      vector_float v, prev;
      asc_loadalign(v, o + r * kD + c);
      if (!first) {
        asc_loadalign(prev, acc + r * kD + c);
        asc_add(v, prev, v, all);
      }
      if (scaled) asc_mul(v, v, a, all);
      asc_storealign(acc + r * kD + c, v, all);
    }
  }
}

// The outputs of this core's rows, by SIMD in two passes: finish_rows_vf, every row at once (one lane a
// row): lse = m + log(l) (m the reference max l is relative to), +inf for an empty row (l 0: no valid
// token, or only -inf logits; its m stays -inf) or with a +inf logit (m +inf, l NaN); the row's output
// factor f = 1 / l, divided by 1 + exp(sink - lse) with a sink; and its `keep` flag, 0 for an empty row.
// finish_out_vf: out = acc * f in BF16, 128 columns a step (even and odd columns widened apart, rounded
// into BF16's even and odd elements and OR-ed back together), 0 where keep is 0: an empty row's acc may
// hold 0 x inf = NaN from P . V over -inf V rows, and its out is 0 as the reference's.
constexpr uint32_t kKeepOffset = 64;  // floats from the factors to the keep flags (32-byte aligned)
__simd_vf__ inline void finish_rows_vf(__ubuf__ float* m, __ubuf__ float* l, __ubuf__ float* sink, int32_t has_sink,
                                       __ubuf__ float* lse, __ubuf__ float* factor) {
  static_assert(kRows <= kKeepOffset, "finish_rows_vf: one lane a row, the flags behind the factors");
  uint32_t rows = kRows;
  const vector_bool live = asc_update_mask_b32(rows);
  vector_float mv, lv, row_lse, f, inf, one, zero;
  asc_loadalign(mv, m);
  asc_loadalign(lv, l);
  asc_duplicate_scalar(inf, bits_to_float(0x7F800000u), live);
  asc_duplicate_scalar(one, 1.0f, live);
  asc_duplicate_scalar(zero, 0.0f, live);
  vector_bool empty, m_inf;
  asc_eq_scalar(empty, lv, 0.0f, live);
  asc_eq_scalar(m_inf, mv, bits_to_float(0x7F800000u), live);
  asc_ln(row_lse, lv, live);
  asc_add(row_lse, row_lse, mv, live);
  asc_select(row_lse, inf, row_lse, empty);
  asc_select(row_lse, inf, row_lse, m_inf);
  asc_div(f, one, lv, live);
  if (has_sink) {
    vector_float sv, d;
    asc_loadalign(sv, sink);
    asc_sub(d, sv, row_lse, live);
    asc_exp(d, d, live);
    asc_add(d, d, one, live);
    asc_div(f, f, d, live);
  }
  vector_float keep;
  asc_select(keep, zero, one, empty);
  asc_storealign(lse, row_lse, live);
  asc_storealign(factor, f, live);
  asc_storealign(factor + kKeepOffset, keep, live);
}

__simd_vf__ inline void finish_out_vf(__ubuf__ float* acc, __ubuf__ float* factor, __ubuf__ bfloat16_t* out) {
  const vector_bool all = asc_create_mask_b16(PAT_ALL);  // every lane of either width
  static_assert(kD % 128 == 0, "finish_out_vf: 128 columns a step");
  vector_float zero;
  asc_duplicate_scalar(zero, 0.0f, all);
  for (uint32_t r = 0; r < kRows; ++r) {
    vector_float f, keep;
    asc_loadalign_brc_elem(f, factor, int32_t(r));
    asc_loadalign_brc_elem(keep, factor, int32_t(kKeepOffset + r));
    vector_bool empty;
    asc_eq_scalar(empty, keep, 0.0f, all);
    for (uint32_t c = 0; c < kD; c += 128) {
      vector_float even, odd;
      asc_loadalign_deintlv(even, odd, acc, int32_t(r * kD + c));
      asc_mul(even, even, f, all);
      asc_mul(odd, odd, f, all);
      asc_select(even, zero, even, empty);
      asc_select(odd, zero, odd, empty);
      vector_bfloat16_t lo, hi;
      asc_float2bfloat16_rn(lo, even, all);
      asc_float2bfloat16_rn_v2(hi, odd, all);
      vector_uint16_t both;
      asc_or(both, (vector_uint16_t&)lo, (vector_uint16_t&)hi, all);
      asc_storealign((__ubuf__ uint16_t*)out + r * kD + c, both, all);
    }
  }
}

}  // namespace fmla_ascend
