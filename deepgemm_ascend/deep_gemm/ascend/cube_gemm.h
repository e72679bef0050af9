// deep_gemm/ascend/cube_gemm.h — the cube side of deep_gemm's BF16 GEMMs on Ascend 950 (dav-3510),
// written against the AscendC C API (c_api/asc_simd.h).
//
// One output tile D[m0:m0+BLOCK_M, n0:n0+BLOCK_N] accumulates in FP32 in L0C:
//   GM --MTE2 (nd2nz / dn2nz)--> L1 (kL1Stages stages of BLOCK_K, 2 unless a kernel sets DG_L1_STAGES)
//   --MTE1--> L0A/L0B (2 stages of MAD_K)
//   --M (asc_mmad)--> L0C (2 tile stages where two fit, so FixPipe of one tile overlaps the next tile's
//   K loop; a 256 x 256 FP32 tile fills L0C alone, and its FixPipe then waits for the next tile's start).
// Every buffer hand-off is a pipe flag (asc_sync_notify / asc_sync_wait):
//   (MTE1 -> MTE2, s) L1 stage s free      (MTE2 -> MTE1, s) L1 stage s loaded
//   (M -> MTE1, p)    L0 stage p free      (MTE1 -> M, p)    L0 stage p loaded
//   (FIX -> M, c)     L0C stage c free     (M -> FIX, c)     L0C stage c complete
// The "free" flags are set once before the first tile (gemm_flags_init) and consumed once after the
// last (gemm_flags_drain), so every notify has exactly one wait.
//
// Tails: the last M / N / K block loads only the rows and columns that exist; nd2nz zero-fills K up
// to the 16-element C0 boundary and the mmad runs K rounded up to 16, so padded K contributes 0.
// Rows past M (columns past N) of a tile are computed from stale L1 but never stored.
//
// Tile order (tile_at): panels of kSwizzleM M blocks, each walked N block by N block, M fastest, so
// the tiles that run at once (a wave of the persistent grid) share a few A rows and B columns in L2.
//
// Operand majors (defines): DG_A_MN_MAJOR = 0: A is [M, K] with stride(-1) == 1 (rows lda apart);
// 1: stride(-2) == 1 (K-columns lda apart), loaded with dn2nz. Likewise DG_B_MN_MAJOR for B [N, K].
#pragma once

#include <c_api/asc_simd.h>

#ifndef DG_BLOCK_M
#define DG_BLOCK_M 128
#endif
#ifndef DG_BLOCK_N
#define DG_BLOCK_N 256
#endif
#ifndef DG_BLOCK_K
#define DG_BLOCK_K 128
#endif
#ifndef DG_MAD_K
#define DG_MAD_K 64
#endif
#ifndef DG_SWIZZLE_M
#define DG_SWIZZLE_M 8
#endif
#ifndef DG_A_MN_MAJOR
#define DG_A_MN_MAJOR 0
#endif
#ifndef DG_B_MN_MAJOR
#define DG_B_MN_MAJOR 0
#endif
// Compile-time M / N / K (deepjit defines from compiled_dims); 0 takes the run-time value.
#ifndef DG_SHAPE_M
#define DG_SHAPE_M 0
#endif
#ifndef DG_SHAPE_N
#define DG_SHAPE_N 0
#endif
#ifndef DG_SHAPE_K
#define DG_SHAPE_K 0
#endif

namespace dg_ascend {

constexpr uint32_t kBlockM = DG_BLOCK_M, kBlockN = DG_BLOCK_N, kBlockK = DG_BLOCK_K, kMadK = DG_MAD_K;
constexpr uint32_t kC0 = 16;       // BF16 elements per 32-byte fractal row
constexpr uint32_t kFrac = 512;    // bytes per 16 x C0 fractal
constexpr uint32_t kL1A = kBlockM * kBlockK * 2, kL1B = kBlockN * kBlockK * 2, kL1Stage = kL1A + kL1B;
constexpr uint32_t kL0A = kBlockM * kMadK * 2, kL0B = kBlockN * kMadK * 2, kL0C = kBlockM * kBlockN * 4;
constexpr uint32_t kL0CStages = 2 * kL0C <= 256 * 1024 ? 2 : 1, kSwizzleM = DG_SWIZZLE_M;
// L1 stages of a K block (DG_L1_STAGES, a kernel's choice: more let a tile's first block load while the
// previous tile's last blocks compute).
#ifndef DG_L1_STAGES
#define DG_L1_STAGES 2
#endif
constexpr uint32_t kL1Stages = DG_L1_STAGES;

static_assert(kBlockM % 16 == 0 && kBlockN % 16 == 0, "tile M and N are multiples of 16");
static_assert(kBlockK % kMadK == 0 && kMadK % kC0 == 0, "BLOCK_K is a multiple of MAD_K, MAD_K of C0");
static_assert(kL1Stages >= 1, "at least one L1 stage");
#ifndef DG_MX_STAGES
static_assert(kL1Stages * kL1Stage <= 512 * 1024, "the L1 stages exceed L1 (512 KiB)");
#endif
static_assert(2 * kL0A <= 64 * 1024 && 2 * kL0B <= 64 * 1024, "two L0A / L0B stages exceed 64 KiB");
static_assert(kL0C <= 256 * 1024, "an L0C tile exceeds L0C (256 KiB)");
static_assert(kSwizzleM >= 1, "a tile panel has at least one M block");

__aicore__ inline uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }
__aicore__ inline uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

// The problem as the kernel sees it: D[M, N] = A[M, K] . B[N, K]^T; ld* are the strides (elements)
// of each operand's non-unit dimension.
struct Problem {
  uint32_t m, n, k;
  int64_t lda, ldb;
  uint32_t num_m_blocks, num_n_blocks;
};

// Output tile t of the persistent walk: (M block, N block), panel by panel (see the header).
struct TileAt {
  uint32_t m_blk, n_blk;
};
__aicore__ inline TileAt tile_at(uint32_t t, uint32_t num_m_blocks, uint32_t num_n_blocks) {
  const uint32_t panel_tiles = kSwizzleM * num_n_blocks, first_m = t / panel_tiles * kSwizzleM;
  const uint32_t height = min_u32(kSwizzleM, num_m_blocks - first_m), in_panel = t % panel_tiles;
  return {first_m + in_panel % height, in_panel / height};
}

__aicore__ inline Problem make_problem(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb) {
  Problem p{DG_SHAPE_M ? DG_SHAPE_M : uint32_t(m), DG_SHAPE_N ? DG_SHAPE_N : uint32_t(n),
            DG_SHAPE_K ? DG_SHAPE_K : uint32_t(k), lda, ldb, 0, 0};
  p.num_m_blocks = ceil_div(p.m, kBlockM);
  p.num_n_blocks = ceil_div(p.n, kBlockN);
  return p;
}

// `rows` x `cols` (MN x K) of an operand whose element (r, c) lives at base[r + c * ld] (MN-major)
// or base[r * ld + c] (K-major), into an NZ tile of `tile_rows` rows in L1.
template <bool kMnMajor>
__aicore__ inline void load_l1(__cbuf__ bfloat16_t* dst, __gm__ bfloat16_t* base, uint32_t r0, uint32_t c0,
                               uint32_t rows, uint32_t cols, int64_t ld, uint32_t tile_rows) {
  // one ND matrix; consecutive rows 32 B apart; column blocks tile_rows x 32 B apart
  asc_set_gm2l1_nz_para(1, 1, static_cast<uint16_t>(tile_rows), 0);
  if constexpr (kMnMajor) {
    asc_copy_gm2l1_dn2nz(dst, base + int64_t(c0) * ld + r0, uint64_t(ld) * 2, static_cast<asc_load_l2_cache_mode>(0),
                         static_cast<uint16_t>(rows), cols, 0, false);
  } else {
    asc_copy_gm2l1_nd2nz(dst, base + int64_t(r0) * ld + c0, uint64_t(ld) * 2, static_cast<asc_load_l2_cache_mode>(0),
                         static_cast<uint16_t>(rows), cols, 0, false);
  }
}

__aicore__ inline void gemm_flags_init() {
  for (uint32_t s = 0; s < kL1Stages; ++s) asc_sync_notify(PIPE_MTE1, PIPE_MTE2, s);
  asc_sync_notify(PIPE_M, PIPE_MTE1, 0);
  asc_sync_notify(PIPE_M, PIPE_MTE1, 1);
  for (uint32_t c = 0; c < kL0CStages; ++c) asc_sync_notify(PIPE_FIX, PIPE_M, c);
}

__aicore__ inline void gemm_flags_drain() {
  for (uint32_t s = 0; s < kL1Stages; ++s) asc_sync_wait(PIPE_MTE1, PIPE_MTE2, s);
  asc_sync_wait(PIPE_M, PIPE_MTE1, 0);
  asc_sync_wait(PIPE_M, PIPE_MTE1, 1);
  for (uint32_t c = 0; c < kL0CStages; ++c) asc_sync_wait(PIPE_FIX, PIPE_M, c);
}

// Pipeline state carried from tile to tile (stage indices keep rotating across tiles) and the
// cube core's on-chip memories. The kernel source (.asc) takes the bases as null-based pointer
// literals, the form both bisheng and the twin's rewrite of kernel sources understand.
struct Stages {
  __cbuf__ uint8_t* l1;
  __ca__ bfloat16_t* l0a;
  __cb__ bfloat16_t* l0b;
  __cc__ float* l0c;
  uint32_t s_l1 = 0, s_l0 = 0, s_l0c = 0;
};

// Computes the rows x cols tile at (m0, n0) of D into L0C stage st.s_l0c; returns with
// (M -> FIX, st.s_l0c) notified and waited, i.e. ready for FixPipe. The caller stores the tile,
// then calls tile_release. With k_batches > 1 the tile sums k_batches products, batch r's operands
// at a + r * a_batch_stride and b + r * b_batch_stride (the einsum bmk,bnk->mn reduces over b so).
__aicore__ inline __cc__ float* tile_compute(const Problem& p, __gm__ bfloat16_t* a, __gm__ bfloat16_t* b,
                                             uint32_t m0, uint32_t n0, uint32_t rows, uint32_t cols, Stages& st,
                                             uint32_t k_batches = 1, int64_t a_batch_stride = 0,
                                             int64_t b_batch_stride = 0) {
  const uint32_t m16 = ceil_div(rows, 16) * 16, n16 = ceil_div(cols, 16) * 16;
  __cc__ float* acc = st.l0c + st.s_l0c * (kL0C / 4);

  asc_sync_wait(PIPE_FIX, PIPE_M, st.s_l0c);  // the previous FixPipe out of this L0C stage is done
  const uint32_t num_k_blocks = ceil_div(p.k, kBlockK);
  for (uint32_t kbr = 0; kbr < k_batches * num_k_blocks; ++kbr) {
    const uint32_t r = kbr / num_k_blocks, kb = kbr % num_k_blocks;
    const uint32_t k0 = kb * kBlockK, kk = min_u32(p.k - k0, kBlockK);
    __gm__ bfloat16_t* a_r = a + int64_t(r) * a_batch_stride;
    __gm__ bfloat16_t* b_r = b + int64_t(r) * b_batch_stride;
    __cbuf__ bfloat16_t* l1a = (__cbuf__ bfloat16_t*)(st.l1 + st.s_l1 * kL1Stage);
    __cbuf__ bfloat16_t* l1b = (__cbuf__ bfloat16_t*)(st.l1 + st.s_l1 * kL1Stage + kL1A);
    asc_sync_wait(PIPE_MTE1, PIPE_MTE2, st.s_l1);
    load_l1<DG_A_MN_MAJOR != 0>(l1a, a_r, m0, k0, rows, kk, p.lda, kBlockM);
    load_l1<DG_B_MN_MAJOR != 0>(l1b, b_r, n0, k0, cols, kk, p.ldb, kBlockN);
    asc_sync_notify(PIPE_MTE2, PIPE_MTE1, st.s_l1);
    asc_sync_wait(PIPE_MTE2, PIPE_MTE1, st.s_l1);
    for (uint32_t s0 = 0; s0 < kk; s0 += kMadK) {
      const uint32_t sk = ceil_div(min_u32(kk - s0, kMadK), kC0) * kC0;  // K of this mmad, C0-aligned
      const uint8_t k_steps = static_cast<uint8_t>(sk / kC0);
      __ca__ bfloat16_t* a0 = st.l0a + st.s_l0 * (kL0A / 2);
      __cb__ bfloat16_t* b0 = st.l0b + st.s_l0 * (kL0B / 2);
      asc_sync_wait(PIPE_M, PIPE_MTE1, st.s_l0);
      asc_copy_l12l0a(a0, l1a, 0, static_cast<uint16_t>(s0 / kC0), static_cast<uint8_t>(m16 / 16), k_steps,
                      static_cast<int16_t>(kBlockM / 16), static_cast<uint16_t>(m16 / 16));
      asc_copy_l12l0b(b0, l1b, 0, static_cast<uint16_t>(s0 / kC0), static_cast<uint8_t>(n16 / 16), k_steps,
                      static_cast<int16_t>(kBlockN / 16), static_cast<uint16_t>(n16 / 16));
      asc_sync_notify(PIPE_MTE1, PIPE_M, st.s_l0);
      asc_sync_wait(PIPE_MTE1, PIPE_M, st.s_l0);
      asc_mmad(acc, a0, b0, static_cast<uint16_t>(m16), static_cast<uint16_t>(sk), static_cast<uint16_t>(n16), 0,
               true, false, kbr == 0 && s0 == 0);
      asc_sync_notify(PIPE_M, PIPE_MTE1, st.s_l0);
      st.s_l0 ^= 1;
    }
    asc_sync_notify(PIPE_MTE1, PIPE_MTE2, st.s_l1);
    st.s_l1 = (st.s_l1 + 1) % kL1Stages;
  }
  asc_sync_notify(PIPE_M, PIPE_FIX, st.s_l0c);
  asc_sync_wait(PIPE_M, PIPE_FIX, st.s_l0c);
  return acc;
}

// FixPipe: the rows x cols tile at `acc` (NZ, M16 rows per column block) to row-major D in GM
// (rows ldd elements apart), FP32 as is or rounded to BF16. The intrinsic calls of this header use
// the argument order the twin and TileLang 0.1.15 use (see tests/deepjit/ascend_twin/BUGS.md on
// asc-devkit's longer dav-3510 forms); they are kept here so a change of form touches one place.
template <typename D>
__aicore__ inline void store_tile_gm(__gm__ D* dst, __cc__ float* acc, uint32_t rows, uint32_t cols, int64_t ldd) {
  constexpr asc_quant_mode quant = sizeof(D) == 4 ? asc_quant_mode::NoQuant : asc_quant_mode::F322BF16;
  asc_set_l0c_copy_nz_para(1, 0, 0);
  asc_copy_l0c2gm(dst, acc, static_cast<uint16_t>(cols), static_cast<uint16_t>(rows), static_cast<uint32_t>(ldd),
                  static_cast<uint16_t>(ceil_div(rows, 16) * 16), static_cast<asc_store_l2_cache_mode>(0),
                  static_cast<asc_unit_flag_mode>(0), quant, static_cast<asc_relu_pre_mode>(0), false, true, false, 0);
}

// FixPipe: the tile as FP32 row-major (rows n16 elements apart) into the UB of both vector cores of
// the block, split along M: vector core s receives rows [s * M16 / 2, (s + 1) * M16 / 2) at `dst`.
__aicore__ inline void store_tile_ub_split_m(__ubuf__ float* dst, __cc__ float* acc, uint32_t rows, uint32_t cols) {
  const uint32_t m16 = ceil_div(rows, 16) * 16, n16 = ceil_div(cols, 16) * 16;
  asc_set_l0c_copy_nz_para(1, 0, 0);
  asc_copy_l0c2ub(dst, acc, static_cast<uint16_t>(n16), static_cast<uint16_t>(m16), n16, static_cast<uint16_t>(m16), 0,
                  asc_dual_dst_mode::SPLIT_M, static_cast<asc_unit_flag_mode>(0), asc_quant_mode::NoQuant,
                  static_cast<asc_relu_pre_mode>(0), false, true, false, 0);
}

// After FixPipe has read the tile: the L0C stage is free again.
__aicore__ inline void tile_release(Stages& st) {
  asc_sync_notify(PIPE_FIX, PIPE_M, st.s_l0c);
  st.s_l0c = (st.s_l0c + 1) % kL0CStages;
}

}  // namespace dg_ascend
