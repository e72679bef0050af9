// deep_gemm/ascend/mx_gemm.h — the cube side of deep_gemm's MX block-scaled GEMMs on Ascend 950:
// one output tile accumulated in FP32 in L0C by asc_mmad_mx, each 32 K-elements of a row scaled by a
// UE8M0 exponent the cube applies itself. Same pipeline, flags and stage state as cube_gemm.h.
//
// Operands (defines): DG_AB_FP4 = 0: E4M3 (C0 = 32 elements), K-major or MN-major (DG_A_MN_MAJOR /
// DG_B_MN_MAJOR, DN->NZ); 1: E2M1 packed two per byte along K (C0 = 64 elements = 32 bytes), K-major
// only, moved as bytes (the data movers have no 4-bit forms) and read as fp4x2_e2m1_t by the mmad.
// Row strides (Problem::lda / ldb) count storage units: elements for FP8, bytes for FP4.
//
// Scales: int16 pairs of UE8M0 (K elements [64p, 64p + 32) in the low byte, [64p + 32, 64p + 64) in the
// high byte), by default MN-major (the Ascend layout): pair p of row r at sf[p * ld_sf + r]. Per K block
// of 256 they are loaded ND->NZ as a pairs x rows matrix (16-row fractals, one pair per 2 bytes) and
// the _mx L1 -> L0 copies put each MAD_K slice's scales beside its data. Other layouts (defines), read
// where they lie, so the kernels of a chain (or the steps of Mega MoE's persistent kernel) need no conversion:
// - DG_SFA_K_MAJOR / DG_SFB_K_MAJOR = 1: pair p of row r at sf[r * ld_sf + p], the packed UE8M0 rows that
//   per-token casts, Mega MoE's dispatch and its SwiGLU step write (an int32 [MN, K / 128] viewed as
//   int16), loaded DN->NZ into the same tile;
// - DG_SFB_UTCCP = 1 (with DG_SFB_K_MAJOR): B's packed rows in upstream's UTCCP order -- within each 128
//   rows, row 32b + a stored at 4a + b -- read in place: per 128 rows, four DN->NZ matrices (b) of 32 rows,
//   each taking every fourth stored row (B's row count a multiple of 128);
// - DG_SFB_ROW_BLOCK = R (B MN-major, M-grouped and dense forms): rows in blocks of R, each block's pairs
//   MN-major, pair p of row r at sf[(r / R) * ceil(K / 64) * R + p * R + r % R] with ld_sf = R
//   (DeepGEMM-Ascend's weight scales, R = its BLOCK_N = 256); a tile's rows lie in one block.
// K tails: data zero-filled to C0 and the mmad K rounded up to C0, so padded elements contribute 0
// whatever their (finite) scale. `k_begin` offsets the data's K for the K-grouped form (any row) and
// `pair_begin` the scales' pairs: a group's scales are group-local (pair p covers its K rows
// [64p, 64p + 64)), so a group may start anywhere and its first K block is loaded from its first row.
#pragma once

#ifndef DG_AB_FP4
#define DG_AB_FP4 0
#endif
#ifndef DG_SFA_K_MAJOR
#define DG_SFA_K_MAJOR 0
#endif
#ifndef DG_SFB_K_MAJOR
#define DG_SFB_K_MAJOR 0
#endif
#ifndef DG_SFB_ROW_BLOCK
#define DG_SFB_ROW_BLOCK 0
#endif
#ifndef DG_SFB_UTCCP
#define DG_SFB_UTCCP 0
#endif
#define DG_MX_STAGES 1  // the MX stages' L1 size is checked below, not as cube_gemm.h's BF16 stages
#include <deep_gemm/ascend/cube_gemm.h>

namespace dg_ascend {

#if DG_AB_FP4
using MxLoad = uint8_t;         // what the data movers copy
using MxElem = fp4x2_e2m1_t;    // what the cube reads
constexpr uint32_t kMxPerUnit = 2;
static_assert(DG_A_MN_MAJOR == 0 && DG_B_MN_MAJOR == 0, "packed FP4 operands are K-major");
#else
using MxLoad = fp8_e4m3fn_t;
using MxElem = fp8_e4m3fn_t;
constexpr uint32_t kMxPerUnit = 1;
#endif

constexpr uint32_t kMxBlockK = 256, kMxMadK = 128, kMxC0 = 32 * kMxPerUnit, kPairK = 64;
constexpr uint32_t kPairsPerBlock = kMxBlockK / kPairK;
constexpr uint32_t kMxL1DataA = kBlockM * kMxBlockK / kMxPerUnit, kMxL1DataB = kBlockN * kMxBlockK / kMxPerUnit;
constexpr uint32_t kMxL1ScaleA = kBlockM * kPairsPerBlock * 2, kMxL1ScaleB = kBlockN * kPairsPerBlock * 2;
constexpr uint32_t kMxL1Stage = kMxL1DataA + kMxL1DataB + kMxL1ScaleA + kMxL1ScaleB;
constexpr uint32_t kMxL0A = kBlockM * kMxMadK / kMxPerUnit, kMxL0B = kBlockN * kMxMadK / kMxPerUnit;
static_assert(kL1Stages * kMxL1Stage <= 512 * 1024 && 2 * kMxL0A <= 64 * 1024 && 2 * kMxL0B <= 64 * 1024,
              "MX stages exceed L1 / L0A / L0B");
static_assert(kMxMadK % kPairK == 0 && kMxMadK % kMxC0 == 0, "an mmad_mx K slice covers whole pairs and C0 columns");

static_assert(DG_SFB_ROW_BLOCK == 0 || (DG_SFB_K_MAJOR == 0 && DG_SFB_ROW_BLOCK % kBlockN == 0),
              "row-blocked B scales are MN-major, a tile's rows in one block");
static_assert(DG_SFB_UTCCP == 0 || (DG_SFB_K_MAJOR == 1 && kBlockN % 128 == 0), "UTCCP rows are K-major, 128 a group");

// Scale pairs [p0, p0 + pairs) of rows [r0, r0 + rows) into a 16-row-fractal tile with kPairsPerBlock
// pairs per fractal column; kKMajor: pair p of row r at sf[r * ld + p], else at sf[p * ld + r].
template <bool kKMajor>
__aicore__ inline void mx_load_scales(__cbuf__ uint16_t* dst, __gm__ uint16_t* sf, int64_t ld, uint32_t r0,
                                      uint32_t p0, uint32_t rows, uint32_t pairs) {
  asc_set_gm2l1_nz_para(1, 1, static_cast<uint16_t>(kPairsPerBlock), 0);
  if constexpr (kKMajor) {
    asc_copy_gm2l1_dn2nz(dst, sf + int64_t(r0) * ld + p0, uint64_t(ld) * 2, static_cast<asc_load_l2_cache_mode>(0),
                         static_cast<uint16_t>(pairs), rows, 0, false);
  } else {
    asc_copy_gm2l1_nd2nz(dst, sf + int64_t(p0) * ld + r0, uint64_t(ld) * 2, static_cast<asc_load_l2_cache_mode>(0),
                         static_cast<uint16_t>(pairs), rows, 0, false);
  }
}

// rows x kk elements (MN x K) from (r0, k0) of an operand, into an NZ tile of `tile_rows` rows.
template <bool kMnMajor>
__aicore__ inline void mx_load_data(__cbuf__ MxLoad* dst, __gm__ MxLoad* base, int64_t ld, uint32_t r0, uint32_t k0,
                                    uint32_t rows, uint32_t kk, uint32_t tile_rows) {
  asc_set_gm2l1_nz_para(1, 1, static_cast<uint16_t>(tile_rows), 0);
  if constexpr (kMnMajor) {
    asc_copy_gm2l1_dn2nz(dst, base + int64_t(k0) * ld + r0, uint64_t(ld), static_cast<asc_load_l2_cache_mode>(0),
                         static_cast<uint16_t>(rows), kk, 0, false);
  } else {
    asc_copy_gm2l1_nd2nz(dst, base + int64_t(r0) * ld + k0 / kMxPerUnit, uint64_t(ld) * sizeof(MxLoad),
                         static_cast<asc_load_l2_cache_mode>(0), static_cast<uint16_t>(rows),
                         ceil_div(kk, kMxPerUnit), 0, false);
  }
}

// As mx_load_scales<true> for K-major rows in UTCCP order (rows a multiple of 128, r0 of 128): stored row
// 4a + b of a group holds row 32b + a, so matrix b takes stored rows b, b + 4, ... into columns [32b, 32b + 32)
// of the group's 128 (two 16-column blocks apart).
__aicore__ inline void mx_load_scales_utccp(__cbuf__ uint16_t* dst, __gm__ uint16_t* sf, int64_t ld, uint32_t r0,
                                            uint32_t p0, uint32_t rows, uint32_t pairs) {
  asc_set_gm2l1_nz_para(4, 1, static_cast<uint16_t>(kPairsPerBlock), static_cast<uint16_t>(2 * kPairsPerBlock));
  for (uint32_t q = 0; q < rows; q += 128)  // the group's first column block: q / 16 blocks of kPairsPerBlock rows
    asc_copy_gm2l1_dn2nz(dst + q * kPairsPerBlock, sf + int64_t(r0 + q) * ld + p0, uint64_t(ld) * 8,
                         static_cast<asc_load_l2_cache_mode>(0), static_cast<uint16_t>(pairs), 32, uint64_t(ld) * 2,
                         false);
}

// Computes the rows x cols tile at (m0, n0) over K [k_begin, k_begin + p.k), scales from pair
// pair_begin on, into L0C stage st.s_l0c; returns as tile_compute does (ready for FixPipe, then
// tile_release).
// kVecOperand (fp8_fp4_mx_gemm.asc, m_grouped_fp8_fp4_mx_gemm.asc; fp4_l1_widen.h): 0 both operands
// come from GM by MTE2; 1 (A) or 2 (B): that
// operand's stage is written into L1 by the block's vector cores (FP4 widened to E4M3 on the way), so
// the cube waits for both halves (cross-core flag 0) before reading the stage and hands it back (flag 1)
// once its MTE1 reads are issued.
template <int kVecOperand = 0>
__aicore__ inline __cc__ float* mx_tile_compute(const Problem& p, __gm__ MxLoad* a, __gm__ MxLoad* b,
                                                __gm__ uint16_t* sfa, __gm__ uint16_t* sfb, int64_t ld_sfa,
                                                int64_t ld_sfb, uint32_t k_begin, uint32_t pair_begin, uint32_t m0,
                                                uint32_t n0, uint32_t rows, uint32_t cols, Stages& st) {
  const uint32_t m16 = ceil_div(rows, 16) * 16, n16 = ceil_div(cols, 16) * 16;
  __cc__ float* acc = st.l0c + st.s_l0c * (kL0C / 4);
  asc_sync_wait(PIPE_FIX, PIPE_M, st.s_l0c);
  const uint32_t num_k_blocks = ceil_div(p.k, kMxBlockK);
#if DG_SFB_ROW_BLOCK
  sfb += int64_t(n0 / DG_SFB_ROW_BLOCK) * ceil_div(p.k, kPairK) * DG_SFB_ROW_BLOCK;  // the tile's row block
  const uint32_t sf_n0 = n0 % DG_SFB_ROW_BLOCK;
#else
  const uint32_t sf_n0 = n0;
#endif
  for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
    const uint32_t k0 = kb * kMxBlockK, kk = min_u32(p.k - k0, kMxBlockK), kg = k_begin + k0;
    __cbuf__ uint8_t* stage = st.l1 + st.s_l1 * kMxL1Stage;
    __cbuf__ MxLoad* l1a = (__cbuf__ MxLoad*)stage;
    __cbuf__ MxLoad* l1b = (__cbuf__ MxLoad*)(stage + kMxL1DataA);
    __cbuf__ uint16_t* l1sa = (__cbuf__ uint16_t*)(stage + kMxL1DataA + kMxL1DataB);
    __cbuf__ uint16_t* l1sb = (__cbuf__ uint16_t*)(stage + kMxL1DataA + kMxL1DataB + kMxL1ScaleA);
    asc_sync_wait(PIPE_MTE1, PIPE_MTE2, st.s_l1);
    if constexpr (kVecOperand != 1) mx_load_data<DG_A_MN_MAJOR != 0>(l1a, a, p.lda, m0, kg, rows, kk, kBlockM);
    if constexpr (kVecOperand != 2) mx_load_data<DG_B_MN_MAJOR != 0>(l1b, b, p.ldb, n0, kg, cols, kk, kBlockN);
    mx_load_scales<DG_SFA_K_MAJOR != 0>(l1sa, sfa, ld_sfa, m0, pair_begin + k0 / kPairK, rows, ceil_div(kk, kPairK));
#if DG_SFB_UTCCP
    mx_load_scales_utccp(l1sb, sfb, ld_sfb, sf_n0, pair_begin + k0 / kPairK, cols, ceil_div(kk, kPairK));
#else
    mx_load_scales<DG_SFB_K_MAJOR != 0>(l1sb, sfb, ld_sfb, sf_n0, pair_begin + k0 / kPairK, cols,
                                        ceil_div(kk, kPairK));
#endif
    asc_sync_notify(PIPE_MTE2, PIPE_MTE1, st.s_l1);
    asc_sync_wait(PIPE_MTE2, PIPE_MTE1, st.s_l1);
    if constexpr (kVecOperand != 0) {
      asc_sync_intra_wait(PIPE_MTE1, 0);  // both vector cores' halves of the stage are in L1
      asc_sync_intra_wait(PIPE_MTE1, 16);
    }
    for (uint32_t s0 = 0; s0 < kk; s0 += kMxMadK) {
      const uint32_t sk = ceil_div(min_u32(kk - s0, kMxMadK), kMxC0) * kMxC0;
      const uint8_t k_steps = static_cast<uint8_t>(sk / kMxC0), pairs = static_cast<uint8_t>(ceil_div(sk, kPairK));
      __ca__ MxLoad* a0 = (__ca__ MxLoad*)((__ca__ uint8_t*)st.l0a + st.s_l0 * kMxL0A);
      __cb__ MxLoad* b0 = (__cb__ MxLoad*)((__cb__ uint8_t*)st.l0b + st.s_l0 * kMxL0B);
      asc_sync_wait(PIPE_M, PIPE_MTE1, st.s_l0);
      asc_copy_l12l0a((__ca__ MxElem*)a0, (__cbuf__ MxElem*)l1a, 0, static_cast<uint16_t>(s0 / kMxC0),
                      static_cast<uint8_t>(m16 / 16), k_steps, static_cast<int16_t>(kBlockM / 16),
                      static_cast<uint16_t>(m16 / 16));
      asc_copy_l12l0b((__cb__ MxElem*)b0, (__cbuf__ MxElem*)l1b, 0, static_cast<uint16_t>(s0 / kMxC0),
                      static_cast<uint8_t>(n16 / 16), k_steps, static_cast<int16_t>(kBlockN / 16),
                      static_cast<uint16_t>(n16 / 16));
      asc_copy_l12l0a_mx(uint64_t(uintptr_t(a0)) / 16, (__cbuf__ fp8_e8m0_t*)l1sa, 0,
                         static_cast<uint16_t>(s0 / kPairK), static_cast<uint8_t>(m16 / 16), pairs, kPairsPerBlock,
                         pairs);
      asc_copy_l12l0b_mx(uint64_t(uintptr_t(b0)) / 16, (__cbuf__ fp8_e8m0_t*)l1sb, 0,
                         static_cast<uint16_t>(s0 / kPairK), static_cast<uint8_t>(n16 / 16), pairs, kPairsPerBlock,
                         pairs);
      asc_sync_notify(PIPE_MTE1, PIPE_M, st.s_l0);
      asc_sync_wait(PIPE_MTE1, PIPE_M, st.s_l0);
      asc_mmad_mx(acc, (__ca__ MxElem*)a0, (__cb__ MxElem*)b0, static_cast<uint16_t>(m16), static_cast<uint16_t>(sk),
                  static_cast<uint16_t>(n16), 0, true, false, kb == 0 && s0 == 0);
      asc_sync_notify(PIPE_M, PIPE_MTE1, st.s_l0);
      st.s_l0 ^= 1;
    }
    if constexpr (kVecOperand != 0) {
      asc_sync_intra_arrive(PIPE_MTE1, 1);  // the vector cores' stage is free again
      asc_sync_intra_arrive(PIPE_MTE1, 16 + 1);
    }
    asc_sync_notify(PIPE_MTE1, PIPE_MTE2, st.s_l1);
    st.s_l1 = (st.s_l1 + 1) % kL1Stages;
  }
  asc_sync_notify(PIPE_M, PIPE_FIX, st.s_l0c);
  asc_sync_wait(PIPE_M, PIPE_FIX, st.s_l0c);
  return acc;
}

}  // namespace dg_ascend
