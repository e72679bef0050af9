// flash_mla/ascend/sparse_mla_vec.h — the vector-core pieces of sparse_mla.asc: token dequantisation
// into the NZ K tile (BF16 records copied into it), the zeroing of an invalid token's BF16 row and the accumulator fold, all SIMD register code
// over Unified Buffer pointers (no on-chip base literals here: sparse_mla.asc owns the UB map); the online
// softmax and the final normalisation are online_softmax.h's.
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

#include <flash_mla/ascend/nz_rows.h>
#include <flash_mla/ascend/online_softmax.h>

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

// The quantised records' dequantisation by SIMD registers: dims [0, kDqk) of `count` gathered records
// (raw + t * kRawSlot) as row t of the NZ K tile `k` (store_nz), as the reference's gather: code in FP32
// times its scale in FP32, rounded once to BF16 (nearest even), NaN -> 0, a token with valid[t] == 0 a row of
// zeros (its record was not loaded; the E8M0 and FP4 formats' zeros may be -0, below). BF16 records go in
// by fmla_nz::rows_vf (sparse_mla.asc gather_finish).
//  FP8 codes, 256 a register, e4m3 -> FP32 by quarters: asc_e4m32float(_v2/_v3/_v4) part k holds code 4i + k
//  in FP32 lane i. An e4m3 value has 4 significant bits, so its FP32 bits end in 16 zero bits and their top
//  half is the value in BF16: (part 0 >> 16) | part 2 is a register `a` of BF16 elements 2i = dim 4i,
//  2i + 1 = dim 4i + 2; parts 1 and 3 give `b` (dims 4i + 1, 4i + 3); the interleaving store then writes
//  a0 b0 a1 b1 ... = dims 0, 1, 2, 3, ... of the chunk.
//  E8M0 scales (V4.1 FP8: 16, one per 32 dims; MODEL1: 7, one per 64): the product is taken in BF16, where
//  2^(b - 127) is exact for every byte b (b << 7; byte 0 the subnormal 2^-127, 0x0040), and a product of
//  an e4m3 code and a power of two is exact in FP32: BF16's multiply, rounding that exact product to
//  nearest even once, gives the reference's bits (subnormal products included, as IEEE rounds them; the
//  docs do not say whether the vector unit keeps BF16 subnormals, so scales under 2^-117 may flush there).
//  Two BF16 multiplies a 256-dim chunk instead of four FP32 ones and four roundings. The scale of element
//  e of a / b in chunk h is scale (e >> 4) + 8h (32 dims) or (e >> 5) + 4h (64 dims): a register gather
//  from a table of 8 (V4.1) or 16 (MODEL1) tokens' BF16 scales, built at once from their records by a
//  gather from UB (e8m0_tokens: 16 or 8 scale bytes a token, MODEL1's pad byte among them).
//  NaN -> 0 without a pass over the output: NaN codes (0x7F, 0xFF) become 0 in the code register (and
//  0x7F, compare, select: 256 codes at once), a NaN scale (byte 255) and every scale of an invalid token
//  become 0 in the table, so a product is finite or an overflow's inf as the reference's. A zero from a
//  zeroed scale carries its code's sign (-0 where the reference writes +0): a sum of products differs only
//  where every term is such a zero, so only the sign of a zero output can differ.
//  V3.2 (4 FP32 scales, any FP32 value: inf x 0 = NaN) keeps the FP32 products and zeroes NaN on the BF16
//  results: an element is zeroed where (bits & 0x7FFF) >= thr, thr = 0x7F81 (the smallest NaN magnitude)
//  for a valid token and 0 (everything) for an invalid one; the scales come from a register `table`
//  (scale j in 32-bit lane j) by the register gather at index (64 * chunk + i) >> 5, and its RoPE from the
//  same register, shifted down 8 BF16 lanes by the register gather.
//  MODEL1: dims 448..511 are BF16 RoPE (record bytes 448..575), the last 64 of the second chunk's 256: its
//    `a` and `b` elements 96..127 take the even / odd RoPE elements, which the deinterleaving load from
//    record byte 64 puts exactly there (element j of the pair <- BF16 element 2j / 2j + 1 from byte 64),
//    zeroed where NaN as V3.2's results. The second chunk's codes and scale lanes past dim 447 (RoPE bytes,
//    the pad byte) are computed and dropped by that select.
//  V4.1 FP4 (256 bytes of E2M1 pairs, 32 E4M3 scales one per 16 dims), 128 dims a step: the unpacking load
//    puts payload byte k in byte 4k, so asc_e2m1x22bfloat16's quarter 0 gives BF16 element i = dim i of the
//    step (the pair of byte i / 2) in order, multiplied in BF16 by scale (i >> 4) + 8 * step: an E2M1 value
//    (at most 2 significant bits, 0.5 to 6) times an E4M3 scale (4 bits, 2^-9 to 448) is exact in BF16, never
//    subnormal. The scale table: E4M3 -> FP32 (exact) from the same unpacking load, its top halves as BF16,
//    NaN scales and an invalid token's scales 0 (E2M1 has no NaN or inf).
struct DequantConsts {
  vector_bool all, head96, rope64;
  vector_uint32_t idx[2];                     // V3.2's scale lanes of chunks 0, 1
  vector_uint16_t sidx[4];                    // E8M0 / FP4 scale elements of chunks 0 .. 3 (FP8: 0, 1)
  vector_uint16_t zero, magnitude, nan_min, rope_idx;
  vector_uint8_t code_mag, code_zero;
  vector_uint32_t zero32;
  vector_uint16_t bf16_min;                   // 2^-127 in BF16 (a subnormal)
};

// 256 e4m3 codes as FP32 by quarters: p_k lane i holds code 4i + k (exact).
__simd_callee__ inline void widen_e4m3(vector_float& p0, vector_float& p1, vector_float& p2, vector_float& p3,
                                       const vector_uint8_t& q, vector_bool all) {
  asc_e4m32float(p0, (const vector_fp8_e4m3fn_t&)q, all);
  asc_e4m32float_v2(p1, (const vector_fp8_e4m3fn_t&)q, all);
  asc_e4m32float_v3(p2, (const vector_fp8_e4m3fn_t&)q, all);
  asc_e4m32float_v4(p3, (const vector_fp8_e4m3fn_t&)q, all);
}

// The BF16 register of two FP32 registers of e4m3 values: lo's values in the even elements, hi's in the odd.
__simd_callee__ inline void bf16_pair(vector_uint16_t& x, const vector_float& lo, const vector_float& hi,
                                      const DequantConsts& c) {
  vector_uint32_t even;
  asc_shiftright_scalar(even, (const vector_uint32_t&)lo, int16_t(16), c.all);
  asc_or((vector_uint32_t&)x, even, (const vector_uint32_t&)hi, c.all);
}

// Dims [256 * h, 256 * h + 256) of an E8M0-scaled record: the codes at `codes`, BF16 scale elements of
// `table` by `idx`, into the BF16 registers a / b (see above).
__simd_callee__ inline void e8m0_chunk(vector_uint16_t& a, vector_uint16_t& b, __ubuf__ uint8_t* codes,
                                       vector_uint16_t table, vector_uint16_t idx, const DequantConsts& c) {
  vector_uint8_t q, mag;
  asc_loadalign(q, codes);
  asc_and(mag, q, c.code_mag, c.all);
  vector_bool nan;
  asc_eq(nan, mag, c.code_mag, c.all);
  asc_select(q, c.code_zero, q, nan);
  vector_float p0, p1, p2, p3;
  widen_e4m3(p0, p1, p2, p3, q, c.all);
  bf16_pair(a, p0, p2, c);
  bf16_pair(b, p1, p3, c);
  vector_uint16_t scale;
  asc_gather(scale, table, idx);
  asc_mul((vector_bfloat16_t&)a, (vector_bfloat16_t&)a, (vector_bfloat16_t&)scale, c.all);
  asc_mul((vector_bfloat16_t&)b, (vector_bfloat16_t&)b, (vector_bfloat16_t&)scale, c.all);
}

// V3.2's dims [256 * c, 256 * c + 256): FP32 products with the FP32 scales by lane from `table`, rounded.
__simd_callee__ inline void v32_chunk(vector_uint16_t& a, vector_uint16_t& b, __ubuf__ uint8_t* codes,
                                      vector_uint32_t table, const DequantConsts& c, uint32_t chunk) {
  vector_uint8_t q;
  asc_loadalign(q, codes);
  vector_uint32_t scale;
  asc_gather(scale, table, c.idx[chunk]);
  vector_float p0, p1, p2, p3;
  widen_e4m3(p0, p1, p2, p3, q, c.all);
  asc_mul(p0, p0, (vector_float&)scale, c.all);
  asc_mul(p1, p1, (vector_float&)scale, c.all);
  asc_mul(p2, p2, (vector_float&)scale, c.all);
  asc_mul(p3, p3, (vector_float&)scale, c.all);
  vector_bfloat16_t e0, e1, e2, e3;
  asc_float2bfloat16_rn(e0, p0, c.all);
  asc_float2bfloat16_rn_v2(e2, p2, c.all);
  asc_float2bfloat16_rn(e1, p1, c.all);
  asc_float2bfloat16_rn_v2(e3, p3, c.all);
  asc_or(a, (vector_uint16_t&)e0, (vector_uint16_t&)e2, c.all);
  asc_or(b, (vector_uint16_t&)e1, (vector_uint16_t&)e3, c.all);
}

// The vector core's K tile is NZ (nz_rows.h), as the cube's L1 K buffer holds it, kTileHalf rows, so push_k
// moves whole 16-column blocks. A register of 128 elements of row t from column d, masked:
template <class V>
__simd_callee__ inline void store_nz(__ubuf__ bfloat16_t* k, uint32_t t, uint32_t d, V v, vector_bool m) {
  fmla_nz::store((__ubuf__ uint16_t*)k, kTileHalf, t, d, v, m);
}
// 256 elements from column d, the even ones in a and the odd ones in b (asc_storealign_intlv's order).
__simd_callee__ inline void store_nz_intlv(__ubuf__ bfloat16_t* k, uint32_t t, uint32_t d, vector_uint16_t a,
                                           vector_uint16_t b, vector_bool all) {
  vector_uint16_t lo, hi;
  asc_intlv(lo, hi, a, b);
  store_nz(k, t, d, lo, all);
  store_nz(k, t, d + 128, hi, all);
}

// BF16 elements (as bits) whose magnitude bits reach thr become +0.
__simd_callee__ inline void zero_from(vector_uint16_t& x, vector_uint16_t thr, const DequantConsts& c) {
  vector_uint16_t mag;
  asc_and(mag, x, c.magnitude, c.all);
  vector_bool drop;
  asc_ge(drop, mag, thr, c.all);
  asc_select(x, c.zero, x, drop);
}

// The E8M0 formats' tokens, the scales of 128 / per of them at once: one register of 16-bit lanes, lane i the
// BF16 scale (i % per) of token (i / per) of the group (per = 16 V4.1, 8 MODEL1: its 7 and the pad byte),
// gathered byte by byte from the records (asc_gather from UB), with the tokens' valid flags beside them.
__simd_callee__ inline void e8m0_tokens(__ubuf__ uint8_t* raw, __ubuf__ bfloat16_t* k, __ubuf__ int32_t* valid,
                                        uint32_t count, bool model1, uint32_t scale_at, const DequantConsts& c) {
  const uint32_t per = model1 ? 8u : 16u, group = 128u / per;
  const int16_t per_shift = model1 ? 3 : 4;
  vector_uint16_t at, vat;   // each lane's scale byte (from the group's first record) and valid half-word
  {
    vector_int16_t i, tok;
    asc_arange(i, int16_t(0));
    asc_shiftright_scalar(tok, i, per_shift, c.all);
    asc_shiftleft_scalar((vector_int16_t&)vat, tok, int16_t(1), c.all);
    asc_mul_scalar(tok, tok, int16_t(kRawSlot), c.all);
    vector_int16_t low;
    asc_duplicate_scalar(low, int16_t(per - 1), c.all);
    asc_and(i, i, low, c.all);
    asc_add(i, i, tok, c.all);
    asc_add_scalar(i, i, int16_t(scale_at), c.all);
    at = (vector_uint16_t&)i;
  }
  // whole groups: the gathers read a group's every record slot and valid flag (count is kTileHalf)
  static_assert(kTileHalf % 16 == 0, "e8m0_tokens: the slots of whole 8- or 16-token groups");
  for (uint32_t g0 = 0; g0 < count; g0 += group) {
    // b << 7, at least 2^-127's 0x0040 (only byte 0 is below it); 255 (NaN) and invalid tokens' scales 0
    vector_uint16_t sf, ok;
    asc_gather(sf, raw + g0 * kRawSlot, at, c.all);
    asc_gather(ok, (__ubuf__ uint16_t*)(valid + g0), vat, c.all);
    vector_bool nan;
    asc_eq_scalar(nan, sf, uint16_t(255), c.all);
    asc_shiftleft_scalar(sf, sf, int16_t(7), c.all);
    asc_max(sf, sf, c.bf16_min, c.all);
    asc_select(sf, c.zero, sf, nan);
    asc_mul(sf, sf, ok, c.all);
    for (uint32_t tt = 0; tt < group && g0 + tt < count; ++tt) {
      const uint32_t t = g0 + tt;
      __ubuf__ uint8_t* r = raw + t * kRawSlot;
      for (uint32_t h = 0; h < 2; ++h) {
        vector_uint16_t idx, a, b;
        asc_add_scalar(idx, c.sidx[h], uint16_t(per * tt), c.all);
        e8m0_chunk(a, b, r + 256 * h, sf, idx, c);
        if (model1 && h == 1) {  // dims 448..511: the RoPE, NaN zeroed
          vector_uint16_t even, odd;
          asc_loadalign_deintlv(even, odd, (__ubuf__ uint16_t*)(r + 64));
          asc_select(a, a, even, c.head96);
          asc_select(b, b, odd, c.head96);
          vector_uint16_t ok16, thr;
          asc_loadalign_brc_elem(ok16, (__ubuf__ uint16_t*)(valid + t));
          asc_mul(thr, ok16, c.nan_min, c.all);
          zero_from(a, thr, c);
          zero_from(b, thr, c);
        }
        store_nz_intlv(k, t, 256 * h, a, b, c.all);
      }
    }
  }
}

__simd_vf__ inline void dequant_vf(__ubuf__ uint8_t* raw, __ubuf__ bfloat16_t* k, __ubuf__ int32_t* valid,
                                   uint32_t count, int32_t fmt) {
  static_assert(kRawSlot >= 64 + 2 * 256, "dequant_vf: MODEL1's RoPE load reads record bytes 64..575");
  static_assert(kRawSlot >= 512 + 256, "dequant_vf: V3.2's scale table load reads record bytes 512..767");
  DequantConsts c;
  c.all = asc_create_mask_b8(PAT_ALL);
  uint32_t n = 96;
  c.head96 = asc_update_mask_b16(n);
  n = 64;
  c.rope64 = asc_update_mask_b16(n);
  for (uint32_t h = 0; fmt == kFmtV32 && h < 2; ++h) {   // V3.2: 128 dims a scale, 32 lanes of a quarter
    vector_int32_t lane;
    asc_arange(lane, int32_t(64 * h));
    asc_shiftright_scalar(lane, lane, int16_t(5), c.all);
    c.idx[h] = (vector_uint32_t&)lane;
  }
  // element e of chunk h: scale (e >> shift) + h * (128 >> shift), at that table element (E8M0: 16-bit
  // lanes) or twice it (FP4: the low halves of 32-bit lanes)
  const int16_t shift = fmt == kFmtModel1 ? 5 : 4;
  for (uint32_t h = 0; fmt != kFmtV32 && h < (fmt == kFmtFp4 ? 4u : 2u); ++h) {
    vector_int16_t e;
    asc_arange(e, int16_t(0));
    asc_shiftright_scalar(e, e, shift, c.all);
    asc_add_scalar(e, e, int16_t(h * (128u >> shift)), c.all);
    asc_shiftleft_scalar(e, e, int16_t(fmt == kFmtFp4 ? 1 : 0), c.all);
    c.sidx[h] = (vector_uint16_t&)e;
  }
  asc_duplicate_scalar(c.zero, uint16_t(0), c.all);
  asc_duplicate_scalar(c.magnitude, uint16_t(0x7FFF), c.all);
  asc_duplicate_scalar(c.nan_min, uint16_t(0x7F81), c.all);
  asc_duplicate_scalar(c.code_mag, uint8_t(0x7F), c.all);
  asc_duplicate_scalar(c.code_zero, uint8_t(0), c.all);
  asc_duplicate_scalar(c.zero32, 0u, c.all);
  asc_duplicate_scalar(c.bf16_min, uint16_t(0x0040), c.all);
  vector_int16_t rope_lane;
  asc_arange(rope_lane, int16_t(8));
  c.rope_idx = (vector_uint16_t&)rope_lane;
  const uint32_t scale_at = fmt == kFmtModel1 ? 576u : fmt == kFmtFp4 ? 256u : 512u;
  if (fmt == kFmtFp8 || fmt == kFmtModel1) {
    e8m0_tokens(raw, k, valid, count, fmt == kFmtModel1, scale_at, c);
    return;
  }
  for (uint32_t t = 0; t < count; ++t) {
    __ubuf__ uint8_t* r = raw + t * kRawSlot;
    if (fmt == kFmtV32) {
      // thr: 0x7F81 for a valid token (valid[t] is 0 or 1; its low BF16-sized half), 0 for an invalid one
      vector_uint16_t ok16, thr;
      asc_loadalign_brc_elem(ok16, (__ubuf__ uint16_t*)(valid + t));
      asc_mul(thr, ok16, c.nan_min, c.all);
      vector_uint32_t table;
      asc_loadalign(table, (__ubuf__ uint32_t*)(r + scale_at));
      for (uint32_t h = 0; h < 2; ++h) {
        vector_uint16_t a, b;
        v32_chunk(a, b, r + 256 * h, table, c, h);
        zero_from(a, thr, c);
        zero_from(b, thr, c);
        store_nz_intlv(k, t, 256 * h, a, b, c.all);
      }
      if (kDqk > 512) {  // dims 512..575: record bytes 528..655, BF16 lanes 8..71 of `table`
        vector_uint16_t rope;
        asc_gather(rope, (vector_uint16_t&)table, c.rope_idx);
        zero_from(rope, thr, c);
        store_nz(k, t, 512, rope, c.rope64);
      }
      continue;
    }
    // FP4: the BF16 scales in the low halves of the 32-bit lanes; NaN and an invalid token's scales 0
    vector_uint8_t bytes;
    asc_loadalign_unpack4(bytes, r + scale_at);
    vector_float f;
    asc_e4m32float(f, (vector_fp8_e4m3fn_t&)bytes, c.all);
    vector_bool nan;
    asc_ne(nan, f, f, c.all);
    vector_uint32_t table;
    asc_shiftright_scalar(table, (vector_uint32_t&)f, int16_t(16), c.all);
    asc_select(table, c.zero32, table, nan);
    vector_uint32_t ok;   // valid[t], 0 or 1, in every lane: an invalid token's scales become 0
    asc_loadalign_brc_elem(ok, (__ubuf__ uint32_t*)(valid + t));
    asc_mul(table, table, ok, c.all);
    const vector_uint16_t sf = (vector_uint16_t&)table;
    for (uint32_t h = 0; h < kD / 128; ++h) {
      vector_uint8_t q;
      asc_loadalign_unpack4(q, r + 64 * h);
      vector_bfloat16_t v;
      asc_e2m1x22bfloat16(v, (vector_fp4x2_e2m1_t&)q, c.all);
      vector_uint16_t scale;
      asc_gather(scale, sf, c.sidx[h]);
      asc_mul(v, v, (vector_bfloat16_t&)scale, c.all);
      store_nz(k, t, 128 * h, (vector_uint16_t&)v, c.all);
    }
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

// The accumulator from a drained O (this core's kRows x kD rows of the steps' P.V summed in L0C since
// the last drain) when a step moved a reference max, by SIMD: acc = (acc + o) * alpha[row]; o * alpha[row]
// where acc holds nothing yet (`first`). (An item's last O is added by its outputs: online_softmax.h
// finish_out_vf.)
__simd_vf__ inline void fold_vf(__ubuf__ float* acc, __ubuf__ float* o, __ubuf__ float* alpha, uint32_t first) {
  const vector_bool all = asc_create_mask_b32(PAT_ALL);
  static_assert(kD % 64 == 0, "fold_vf: 64 columns a register");
  for (uint32_t r = 0; r < kRows; ++r) {
    vector_float a;
    asc_loadalign_brc_elem(a, alpha, int32_t(r));
    for (uint32_t c = 0; c < kD; c += 64) {
      vector_float v, prev;
      asc_loadalign(v, o + r * kD + c);
      if (!first) {
        asc_loadalign(prev, acc + r * kD + c);
        asc_add(v, prev, v, all);
      }
      asc_mul(v, v, a, all);
      asc_storealign(acc + r * kD + c, v, all);
    }
  }
}

}  // namespace fmla_ascend
