// flash_mla/ascend/dense_attn_vec.h — the vector-core (SIMT) pieces of dense_attn.asc: zeroing the
// rows of a K / V tile past the keys any query row sees (and, for the paged decode cache, NaN
// elements, as the reference's gather does), the online-softmax step with a per-row key limit
// (causal masks, sequence tails, padded rows) and the final normalisation. Each is an asc_vf_call
// region over Unified Buffer pointers; dense_attn.asc owns the UB map.
#pragma once

#include <simt_api/asc_simt.h>
#include <simt_api/asc_bf16.h>
#include <simt_api/asc_fp16.h>

// The twin's timeline sees a SIMT lane's plain arithmetic, math functions and UB accesses only as the kernel
// declares them (deepjit simt_api/asc_simt.h); elsewhere the declaration is nothing. Counts per lane, by hand
// from this source, as sparse_mla_vec.h counts (a division or modulo by a constant 2 instructions, by a
// runtime value 4, expf / logf 15, an FP32 division 10).
#ifndef DJ_SIMT_WORK
#define DJ_SIMT_WORK(alu, ub_loads, ub_stores) ((void)0)
#endif

#ifndef FMLA_DQK
#define FMLA_DQK 576
#endif
#ifndef FMLA_DV
#define FMLA_DV 512
#endif
#ifndef FMLA_FP16
#define FMLA_FP16 0
#endif
#ifndef FMLA_RESCALE_SKIP
#define FMLA_RESCALE_SKIP 8
#endif

namespace fmla_dense {

// The element type of q / k / v / out and of the cube's operands (P included): BF16, or FP16 with FMLA_FP16.
#if FMLA_FP16
using elem_t = half;
#define FMLA_TO_ELEM __float2half_rn
#define FMLA_ELEM_VALUE __half2float
#else
using elem_t = bfloat16_t;
#define FMLA_TO_ELEM __float2bfloat16_rn
#define FMLA_ELEM_VALUE __bfloat162float
#endif

constexpr uint32_t kDqk = FMLA_DQK;          // q / k head dim
constexpr uint32_t kDv = FMLA_DV;            // v head dim (decode: the first kDv dims of k)
constexpr uint32_t kM = 64;                  // query rows (token x head of one kv head) per cube block
constexpr uint32_t kRows = kM / 2;           // rows per vector core (FixPipe SPLIT_M)
constexpr uint32_t kTile = 64;               // keys per step (QK tile width, PV depth)
constexpr uint32_t kTileHalf = kTile / 2;    // keys each vector core loads
constexpr uint32_t kSegs = 8, kSegLen = kTile / kSegs;  // softmax lanes per row
// The reference max of the online softmax moves only when a step's max passes it by more than this
// (natural log): probabilities stay <= e^8 in FP32 / BF16 and most steps leave the accumulator unscaled.
constexpr float kRescaleSkip = float(FMLA_RESCALE_SKIP);

static_assert(kDqk % 16 == 0 && kDqk <= 576, "d_qk: a multiple of 16, at most 576");
static_assert(kDv % 16 == 0 && kDv <= 512 && kDv <= kDqk, "d_v: a multiple of 16, at most 512 and d_qk");

__aicore__ inline float bits_to_float(uint32_t b) {
  union {
    uint32_t u;
    float f;
  } v{b};
  return v.f;
}
__aicore__ inline float neg_inf() { return bits_to_float(0xFF800000u); }

// max that keeps NaN as torch's max does (the device's float max returns the other operand)
__aicore__ inline float nan_max(float a, float b) { return a != a ? a : b != b ? b : max(a, b); }

// Rows t >= loaded of a [kTileHalf, width] tile become zero (keys no row sees: P is 0 there,
// and 0 * a stale NaN would still poison P.V); with nan_to_zero, NaN elements of loaded rows too.
__simt_vf__ __launch_bounds__(512) inline void clean_tile_vf(__ubuf__ elem_t* tile, uint32_t width,
                                                             uint32_t loaded, uint32_t nan_to_zero) {
  for (uint32_t i = threadIdx.x; i < kTileHalf * width; i += blockDim.x) {
    DJ_SIMT_WORK(7, 0, 0);  // loop 2, the row 4, its compare
    if (i / width >= loaded) {
      DJ_SIMT_WORK(1, 0, 1);
      tile[i] = FMLA_TO_ELEM(0.0f);
    } else if (nan_to_zero) {
      DJ_SIMT_WORK(4, 1, 1);  // load, widening, compare, select (the store counted whether taken or not)
      const float v = FMLA_ELEM_VALUE(tile[i]);
      if (v != v) tile[i] = FMLA_TO_ELEM(0.0f);
    }
  }
}

// Rows r >= count of this core's [kRows, kDqk] Q block become zero (padding rows past the sequence).
__simt_vf__ __launch_bounds__(512) inline void zero_rows_vf(__ubuf__ elem_t* q, uint32_t count) {
  for (uint32_t i = threadIdx.x; i < kRows * kDqk; i += blockDim.x) {
    DJ_SIMT_WORK(5, 0, 0);  // loop 2, the row 2, its compare
    if (i / kDqk >= count) {
      DJ_SIMT_WORK(1, 0, 1);
      q[i] = FMLA_TO_ELEM(0.0f);
    }
  }
}

// The step's reference max of a row: the old one unless the step's max passes it by kRescaleSkip.
__aicore__ inline float ref_max(float m_old, __ubuf__ float* part_row) {
  float mx = part_row[0];
  for (uint32_t c = 1; c < kSegs; ++c) mx = nan_max(mx, part_row[c]);
  return m_old != neg_inf() && mx <= m_old + kRescaleSkip ? m_old : nan_max(m_old, mx);
}

// One online-softmax step over S (FP32 [kRows, kTile] row-major) of keys [p0, p0 + kTile): key p
// counts for row r iff p < lim[r]. Three calls (a call boundary is the lanes' barrier):
//   softmax_max_vf:  part[r * kSegs + c] = the max of segment c of row r (scaled);
//   softmax_exp_vf:  probabilities (elem_t) against the step's reference max, in the NZ order of the
//                    cube's A operand for this core's rows (p[(t / 16) * kRows * 16 + r * 16 + t % 16]),
//                    and the segment sums psum;
//   softmax_stat_vf: per row the new reference max m, the running sum l and the factor alpha of the
//                    previous accumulator.
__simt_vf__ __launch_bounds__(kRows * kSegs) inline void softmax_max_vf(__ubuf__ float* s, __ubuf__ int32_t* lim,
                                                                        int32_t p0, __ubuf__ float* part,
                                                                        float scale) {
  const uint32_t i = threadIdx.x, r = i / kSegs, t0 = (i % kSegs) * kSegLen;
  // setup 3 and lim[r]; per key: loop 2, the limit compare 2, s load, scale, nan_max 4; part's store
  DJ_SIMT_WORK(3 + kSegLen * 9 + 1, 1 + kSegLen, 1);
  float mx = neg_inf();
  for (uint32_t t = t0; t < t0 + kSegLen; ++t)
    if (p0 + int32_t(t) < lim[r]) mx = nan_max(mx, s[r * kTile + t] * scale);
  part[i] = mx;
}

__simt_vf__ __launch_bounds__(kRows * kSegs) inline void softmax_exp_vf(__ubuf__ float* s, __ubuf__ int32_t* lim,
                                                                        int32_t p0, __ubuf__ float* part,
                                                                        __ubuf__ float* m, __ubuf__ elem_t* p,
                                                                        __ubuf__ float* psum, float scale) {
  const uint32_t i = threadIdx.x, r = i / kSegs, t0 = (i % kSegs) * kSegLen;
  // setup 3; ref_max: m and the row's kSegs parts, nan_max 4 each, the skip test 5; lim[r]; per key: loop 2,
  // the limit compare 2, s load, scale and subtract, expf, the sum, p's NZ address 5, rounding, store; psum
  DJ_SIMT_WORK(3 + kSegs * 4 + 5 + 1 + kSegLen * (2 + 2 + 2 + 15 + 1 + 5 + 1), 2 + kSegs + kSegLen, kSegLen + 1);
  const float m_new = ref_max(m[r], part + r * kSegs);
  const bool none = m_new == neg_inf();
  float sum = 0.0f;
  for (uint32_t t = t0; t < t0 + kSegLen; ++t) {
    const float e = p0 + int32_t(t) < lim[r] && !none ? expf(s[r * kTile + t] * scale - m_new) : 0.0f;
    sum += e;
    p[(t / 16) * kRows * 16 + r * 16 + t % 16] = FMLA_TO_ELEM(e);
  }
  psum[i] = sum;
}

__simt_vf__ __launch_bounds__(kRows) inline void softmax_stat_vf(__ubuf__ float* part, __ubuf__ float* psum,
                                                                 __ubuf__ float* m, __ubuf__ float* l,
                                                                 __ubuf__ float* alpha) {
  const uint32_t r = threadIdx.x;
  // ref_max, the psum loop (load, add, loop 2), the factor (compares 3, expf), l (load, fma): 3 stores
  DJ_SIMT_WORK(kSegs * 4 + 5 + kSegs * 3 + 18 + 1, 1 + kSegs + kSegs + 1, 3);
  const float m_old = m[r], m_new = ref_max(m_old, part + r * kSegs);
  float sum = 0.0f;
  for (uint32_t c = 0; c < kSegs; ++c) sum += psum[r * kSegs + c];
  float a = 1.0f;
  if (m_new != m_old) a = m_old == neg_inf() ? 0.0f : expf(m_old - m_new);
  m[r] = m_new;
  l[r] = l[r] * a + sum;
  alpha[r] = a;
}

// acc = acc * alpha[row] + o over this core's [kRows, kDv] accumulator (the first step copies o).
__simt_vf__ __launch_bounds__(1024) inline void rescale_vf(__ubuf__ float* acc, __ubuf__ float* o,
                                                           __ubuf__ float* alpha, uint32_t first) {
  for (uint32_t i = threadIdx.x; i < kRows * kDv; i += blockDim.x) {
    DJ_SIMT_WORK(6, 3, 1);  // loop 2, the row, the compare, select, fma; alpha, acc, o; the store
    const float a = alpha[i / kDv];
    acc[i] = first ? o[i] : a == 1.0f ? acc[i] + o[i] : acc[i] * a + o[i];
  }
}

// out = acc / l (elem_t), lse = m + log(l) into slot r * 8 of `lse` (one 32-byte slot per row for its
// own store); a row that saw no key (l == 0: never a step, or every key masked) gets out 0, lse +inf; a +inf
// logit (m = +inf, l NaN from inf - inf) gets lse +inf, as the reference and the host kernels.
__simt_vf__ __launch_bounds__(1024) inline void finish_vf(__ubuf__ float* acc, __ubuf__ elem_t* out,
                                                          __ubuf__ float* m, __ubuf__ float* l,
                                                          __ubuf__ float* lse, uint32_t steps) {
  const float inf = bits_to_float(0x7F800000u);
  for (uint32_t i = threadIdx.x; i < kRows * kDv; i += blockDim.x) {
    DJ_SIMT_WORK(19, 2, 1);  // loop 2, the row, compares 3, the division, rounding, i % kDv == 0 2; l, acc; out
    const uint32_t r = i / kDv;
    const bool empty = steps == 0 || l[r] == 0.0f;
    out[i] = FMLA_TO_ELEM(empty ? 0.0f : acc[i] / l[r]);
    if (i % kDv == 0) {
      DJ_SIMT_WORK(18, 1, 1);  // m, its compare, logf and the add; the lse store
      lse[r * 8] = empty || m[r] == inf ? inf : m[r] + logf(l[r]);
    }
  }
}

}  // namespace fmla_dense
