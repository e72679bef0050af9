// flash_mla/ascend/sparse_mla_vec.h — the vector-core pieces of sparse_mla.asc: token dequantisation
// into BF16 rows (SIMT, an asc_vf_call region), the zeroing of an invalid token's BF16 row and the accumulator
// fold (SIMD), over Unified Buffer pointers (no on-chip base literals here: sparse_mla.asc owns the UB map). The
// online softmax and the final normalisation are online_softmax.h's.
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

#include <flash_mla/ascend/online_softmax.h>
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

}  // namespace fmla_ascend
