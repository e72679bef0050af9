// deep_gemm/ascend/fp4_l1_widen.h — the vector side of the MX GEMMs whose packed FP4 (E2M1, K-major)
// operand is widened on the way into the cube's L1 (fp8_fp4_mx_gemm.asc, m_grouped_fp8_fp4_mx_gemm.asc,
// mega_moe.asc through m_grouped_fp4.h):
// per K block of 256, vector core s loads its half of the tile's FP4 rows (packed bytes, MTE2 into UB),
// widens every nibble to its E4M3 code (exact: every E2M1 value is an E4M3 value, the per-32 scales are
// unchanged) in L1's NZ order with zeros past the rows and K columns that exist, and copies the half tile
// into the L1 stage (UB -> L1) that mx_tile_compute<kVecOperand> then reads.
// Cross-core flags (asc_sync_intra_*): vector -> cube 0 "my half of L1 stage j % 2 is written",
// cube -> vector 1 "stage free". The cube arms two credits at the start (arm_vector_stages), the vector
// cores take the last two at the end (Fp4Widener::drain). Include after mx_gemm.h.
// DG_FP4_SCALE_BIAS = 6: the FP4 operand's scale bytes carry +6 (DeepGEMM-Ascend's weights), so each value is
// widened to value / 64 (exact, e2m1_e4m3.h) and the cube applies the biased scales as they are.
#pragma once

#ifndef DG_FP4_SCALE_BIAS
#define DG_FP4_SCALE_BIAS 0
#endif
static_assert(DG_FP4_SCALE_BIAS == 0 || DG_FP4_SCALE_BIAS == 6, "FP4 scale bias 0 or 6 (DeepGEMM-Ascend's)");

#include <deep_gemm/ascend/e2m1_e4m3.h>

static_assert(DG_AB_FP4 == 0, "the cube reads E4M3 on both sides");
static_assert(dg_ascend::kL1Stages == 2, "the vector cores fill the cube's two L1 stages in turn");

namespace dg_ascend {
namespace fused {

__aicore__ inline void pipe_barrier(pipe_t src, pipe_t dst) {
  asc_sync_notify(src, dst, 7);
  asc_sync_wait(src, dst, 7);
}

// Rows [0, rows) x K columns [0, kk) of the packed half tile `raw` (packed bytes per row: kMxBlockK / 2,
// low nibble first) as E4M3 in L1's NZ order for this core's `half` rows (column block c / 32 holds
// `half` rows of 32 bytes), zeros elsewhere. One register per row: an UNPACK load puts packed byte k in
// 16-bit lane k, the table lookup (e2m1_e4m3.h) gives the row's 256 E4M3 bytes in K order, a select
// zeroes the bytes from kk on (in a K tail only), and one block-strided store sends its 8 blocks of 32
// bytes `half` blocks apart; rows past `rows` get zeros.
__simd_vf__ inline void widen_nz_vf(__ubuf__ uint8_t* raw, __ubuf__ uint8_t* nz, uint32_t rows, uint32_t kk,
                                    uint32_t half) {
  static_assert(kMxBlockK == 256, "one 256-byte register per row of a K block");
  const vector_bool all16 = asc_create_mask_b16(PAT_ALL), all8 = asc_create_mask_b8(PAT_ALL);
  E2m1Table t;
  e2m1_table<DG_FP4_SCALE_BIAS == 6>(t, all16);
  uint32_t left = kk;
  const vector_bool cols = asc_update_mask_b8(left);
  vector_uint8_t zero;
  asc_duplicate_scalar(zero, uint8_t(0), all8);
  for (uint32_t r = 0; r < half; ++r) {
    vector_uint8_t v = zero;
    if (r < rows) {
      vector_uint8_t bytes;
      asc_loadalign_unpack(bytes, raw + r * (kMxBlockK / 2));
      e2m1_widen((vector_uint16_t&)v, (vector_uint16_t&)bytes, t, all16);
      if (kk < kMxBlockK) asc_select(v, v, zero, cols);  // a whole K block has nothing past it
    }
    asc_storealign(nz + r * 32, v, static_cast<uint16_t>(half), 0, all8);
  }
}

// The cube's side: both L1 stages free for the vector cores (once, before the first tile).
__aicore__ inline void arm_vector_stages() {
  for (uint32_t s = 0; s < 2; ++s) {
    asc_sync_intra_arrive(PIPE_MTE1, 1);
    asc_sync_intra_arrive(PIPE_MTE1, 16 + 1);
  }
}

// A vector core's side for tiles of kTileRows rows of the FP4 operand (kBlockM for A, kBlockN for B),
// written at byte `offset` of each L1 stage (0 for A, kMxL1DataA for B).
template <uint32_t kTileRows, uint32_t kOffset>
struct Fp4Widener {
  static constexpr uint32_t kHalf = kTileRows / 2, kPacked = kMxBlockK / 2;
  static constexpr uint32_t kUbRaw = 0, kUbNz = kUbRaw + kHalf * kPacked;  // packed rows, then the E4M3 NZ half tile
  static_assert(kUbNz + kHalf * kMxBlockK <= 248 * 1024, "UB map exceeds 248 KiB");

  __cbuf__ uint8_t* l1;
  __ubuf__ uint8_t* raw;
  __ubuf__ uint8_t* nz;
  uint32_t sub, stage = 0;

  // ub, l1: the bases of UB and L1 (the kernel's (__ubuf__ uint8_t *)0, (__cbuf__ uint8_t *)0).
  __aicore__ inline Fp4Widener(__ubuf__ uint8_t* ub, __cbuf__ uint8_t* l1_base)
      : l1(l1_base), raw(ub + kUbRaw), nz(ub + kUbNz), sub(uint32_t(asc_get_sub_block_id())) {}

  // One tile whose FP4 rows start at `rows0` (operand_rows of them exist) of `src` (ld bytes between packed
  // rows), over K [0, k): the cube's mx_tile_compute<kVecOperand> takes the stages in the same order.
  __aicore__ inline void tile(__gm__ uint8_t* src, int64_t ld, uint32_t rows0, uint32_t operand_rows, uint32_t k) {
    const uint32_t r0 = rows0 + sub * kHalf;
    const uint32_t mine = operand_rows > r0 ? min_u32(operand_rows - r0, kHalf) : 0;
    const uint32_t num_k_blocks = ceil_div(k, kMxBlockK);
    for (uint32_t kb = 0; kb < num_k_blocks; ++kb, stage ^= 1) {
      const uint32_t k0 = kb * kMxBlockK, kk = min_u32(k - k0, kMxBlockK);
      pipe_barrier(PIPE_V, PIPE_MTE2);  // the previous widening has read `raw`
      if (mine)
        asc_copy_gm2ub_align(raw, src + int64_t(r0) * ld + k0 / 2, static_cast<uint16_t>(mine), ceil_div(kk, 2), 0, 0,
                             0, asc_load_l2_cache_mode::NORMAL_FIRST_VICTIM, uint64_t(ld), kPacked);
      pipe_barrier(PIPE_MTE2, PIPE_V);
      pipe_barrier(PIPE_MTE3, PIPE_V);  // the previous half tile has left UB for L1
      widen_nz_vf(raw, nz, mine, kk, kHalf);
      pipe_barrier(PIPE_V, PIPE_MTE3);
      asc_sync_intra_wait(PIPE_MTE3, 1);  // L1 stage `stage` free
      // column block c of this core's rows -> block c * kTileRows + sub * kHalf of the operand (32-byte units)
      asc_copy_ub2l1(l1 + stage * kMxL1Stage + kOffset + sub * kHalf * 32, nz, static_cast<uint16_t>(kMxBlockK / 32),
                     static_cast<uint16_t>(kHalf), 0, static_cast<uint16_t>(kTileRows - kHalf));
      asc_sync_intra_arrive(PIPE_MTE3, 0);
    }
  }
  // The two stage credits left at the end.
  __aicore__ inline void drain() {
    asc_sync_intra_wait(PIPE_MTE3, 1);
    asc_sync_intra_wait(PIPE_MTE3, 1);
  }
};

}  // namespace fused
}  // namespace dg_ascend
