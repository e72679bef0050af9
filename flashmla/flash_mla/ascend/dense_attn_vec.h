// flash_mla/ascend/dense_attn_vec.h — the vector-core pieces of dense_attn.asc, SIMD register code over
// Unified Buffer pointers (dense_attn.asc owns the UB map): zeroing the rows of a K / V tile past the keys any
// query row sees (and, for the paged decode cache, NaN elements, as the reference's gather does), zeroing the
// padding rows of Q, and the accumulator's rescale. The online softmax (with a per-row key limit: causal
// masks, sequence tails, padded rows) and the final normalisation are online_softmax.h's.
#pragma once

#include <flash_mla/ascend/nz_rows.h>
#include <flash_mla/ascend/online_softmax.h>

#ifndef FMLA_DQK
#define FMLA_DQK 576
#endif
#ifndef FMLA_DV
#define FMLA_DV 512
#endif
#ifndef FMLA_FP16
#define FMLA_FP16 0
#endif

namespace fmla_dense {

// The element type of q / k / v / out and of the cube's operands (P included): BF16, or FP16 with FMLA_FP16;
// kNanFloor: the smallest magnitude bit pattern (sign cleared) of a NaN in it.
#if FMLA_FP16
using elem_t = half;
constexpr uint16_t kNanFloor = 0x7C01;
#else
using elem_t = bfloat16_t;
constexpr uint16_t kNanFloor = 0x7F81;
#endif

constexpr uint32_t kDqk = FMLA_DQK;          // q / k head dim
constexpr uint32_t kDv = FMLA_DV;            // v head dim (decode: the first kDv dims of k)
constexpr uint32_t kM = 64;                  // query rows (token x head of one kv head) per cube block
constexpr uint32_t kRows = kM / 2;           // rows per vector core (FixPipe SPLIT_M)
constexpr uint32_t kTile = 64;               // keys per step (QK tile width, PV depth)
constexpr uint32_t kTileHalf = kTile / 2;    // keys each vector core loads

static_assert(kDqk % 16 == 0 && kDqk <= 576, "d_qk: a multiple of 16, at most 576");
static_assert(kDv % 64 == 0 && kDv <= 512 && kDv <= kDqk, "d_v: a multiple of 64, at most 512 and d_qk");

static_assert(kTile == fmla_softmax::kTile, "one FP32 register of logits a row");

// Rows t >= loaded of a [kTileHalf, width] tile become zero (keys no row sees: P is 0 there, and 0 * a stale
// NaN would still poison P.V); with nan_to_zero, NaN elements of loaded rows too (by their bits: magnitude
// above the infinity pattern), 128 elements a register.
__simd_vf__ inline void clean_tile_vf(__ubuf__ elem_t* tile, uint32_t width, uint32_t loaded, uint32_t nan_to_zero) {
  const vector_bool all = asc_create_mask_b16(PAT_ALL);
  vector_uint16_t zero, sign_off;
  asc_duplicate_scalar(zero, uint16_t(0), all);
  asc_duplicate_scalar(sign_off, uint16_t(0x7FFF), all);
  for (uint32_t t = 0; t < kTileHalf; ++t) {
    if (t < loaded && !nan_to_zero) continue;
    __ubuf__ uint16_t* row = (__ubuf__ uint16_t*)tile + t * width;
    for (uint32_t c = 0; c < width; c += 128) {
      uint32_t n = width - c < 128 ? width - c : 128;
      const vector_bool part = asc_update_mask_b16(n);
      if (t >= loaded) {
        asc_storealign(row + c, zero, part);
        continue;
      }
      vector_uint16_t bits, magnitude;
      asc_loadalign(bits, row + c);
      asc_and(magnitude, bits, sign_off, part);
      vector_bool nan;
      asc_ge_scalar(nan, magnitude, kNanFloor, part);
      asc_select(bits, zero, bits, nan);
      asc_storealign(row + c, bits, part);
    }
  }
}

// Rows r >= count of this core's [kRows, kDqk] Q block become zero (padding rows past the sequence).
__simd_vf__ inline void zero_rows_vf(__ubuf__ elem_t* q, uint32_t count) {
  const vector_bool all = asc_create_mask_b16(PAT_ALL);
  vector_uint16_t zero;
  asc_duplicate_scalar(zero, uint16_t(0), all);
  for (uint32_t r = count; r < kRows; ++r)
    for (uint32_t c = 0; c < kDqk; c += 128) {
      uint32_t n = kDqk - c < 128 ? kDqk - c : 128;
      asc_storealign((__ubuf__ uint16_t*)q + r * kDqk + c, zero, asc_update_mask_b16(n));
    }
}

// acc = acc * alpha[row] + o over this core's [kRows, kDv] accumulator (the first step copies o; a factor of 1
// gives acc + o exactly).
__simd_vf__ inline void rescale_vf(__ubuf__ float* acc, __ubuf__ float* o, __ubuf__ float* alpha, uint32_t first) {
  static_assert(kDv % 64 == 0, "rescale_vf: 64 columns a register");
  const vector_bool all = asc_create_mask_b32(PAT_ALL);
  for (uint32_t r = 0; r < kRows; ++r) {
    vector_float a;
    asc_loadalign_brc_elem(a, alpha, int32_t(r));
    for (uint32_t c = 0; c < kDv; c += 64) {
      vector_float v, prev;
      asc_loadalign(v, o + r * kDv + c);
      if (!first) {
        asc_loadalign(prev, acc + r * kDv + c);
        asc_mul(prev, prev, a, all);
        asc_add(v, prev, v, all);
      }
      asc_storealign(acc + r * kDv + c, v, all);
    }
  }
}

// The rows' lse (contiguous, from finish_rows_vf) into one 32-byte slot a row (lse[r * 8]), each row's own
// store to GM.
__simd_vf__ inline void lse_slots_vf(__ubuf__ float* rows_lse, __ubuf__ float* lse) {
  for (uint32_t r = 0; r < kRows; ++r) {
    vector_float v;
    asc_loadalign_brc_elem(v, rows_lse, int32_t(r));
    asc_storealign_1st(lse + r * 8, v);
  }
}

}  // namespace fmla_dense
