// deep_gemm/ascend/mqa_logits.h — what the two lightning-indexer kernels share (mqa_logits.asc,
// paged_mqa_logits.asc): the cube side computing one score tile and the vector side turning it into
// logits. Written against the AscendC C API (c_api/asc_simd.h) and the SIMT API.
//
// A tile is kQTokens query tokens x all DG_HEADS heads (rows (token, head), at most 128) against
// kKvBlock KV positions, the whole head dim DG_HEAD_DIM (32..128) in one K step:
//   GM --MTE2 nd2nz--> L1 (2 stages: Q rows, KV rows, E4M3, C0 = 32) --MTE1--> L0A/L0B (2 stages)
//   --M asc_mmad--> L0C FP32 (2 stages) --FixPipe (ReLU; F32->BF16 with BF16 logits), dual destination SPLIT_N--> UB of both vector cores
// Vector core s receives every row for the KV columns [s * N16/2, (s + 1) * N16/2) of the tile, in one of
// two UB stages, row-major with kKvBlock/2 scores per row, and forms
//   logit[t, j] = scale[j] * sum_h weights[t, h] * relu(score[(t, h), j])
// (the per-token KV scale is positive, so it factors out of the ReLU). SIMD reduces the heads (head_sum_regs:
// per head a broadcast weight times a whole score row, as DeepGEMM-Ascend's indexer does; the tile's weights
// come to UB by MTE2). Clean, uncompressed prefill rows are then finished by SIMD too and stored by MTE3
// (mqa_logits.asc, logits_row_vf); the other forms (and the paged kernel) store the head sums to UB, and SIMT
// lanes (one per KV column) scale them and store straight to GM, only inside the token's KV range; with
// `clean` the other columns of the row get -inf.
//
// DG_MX: the MXFP8 form (DeepGEMM-Ascend's own): q rows and KV rows each carry one UE8M0 exponent per 32
// elements, int16 pairs MN-major (as mx_gemm.h), loaded beside the data and applied by the cube itself
// (asc_mmad_mx); without it asc_mmad on unscaled E4M3. DG_QK_FP4: packed E2M1 q and KV (two per byte,
// moved as bytes, read as fp4x2_e2m1_t by the MX product; 64 elements per 32-byte fractal row). A per-token FP32 KV scale (DG_KV_TOKEN_SF) is
// applied by the vector side either way.
//
// Flags: the cube pipeline uses cube_gemm.h's (gemm_flags_init / drain, tile_release); cube -> vector
// hand-off as bf16_gemm_epilogue.asc: cube -> vector s id u "UB stage u holds a tile", vector s -> cube
// id u (cube sees 16 * s + u) "UB stage u free".
#pragma once

#include <deep_gemm/ascend/cube_gemm.h>
#include <simt_api/asc_simt.h>
#include <simt_api/asc_bf16.h>

// The twin's timeline sees a SIMT lane's plain arithmetic and UB reads only as the kernel declares them
// (deepjit simt_api/asc_simt.h); elsewhere the declaration is nothing.
#ifndef DJ_SIMT_WORK
#define DJ_SIMT_WORK(alu, ub_loads, ub_stores) ((void)0)
#endif

#ifndef DG_HEADS
#define DG_HEADS 32
#endif
#ifndef DG_HEAD_DIM
#define DG_HEAD_DIM 128
#endif
#ifndef DG_MX
#define DG_MX 0
#endif
#ifndef DG_KV_TOKEN_SF
#define DG_KV_TOKEN_SF 1
#endif
// DG_Q_SF_K_MAJOR / DG_KV_SF_K_MAJOR: that operand's MX scales are the caller's packed rows (pair p of row r
// at sf[r * ld + p], as DeepGEMM-Ascend's indexer takes them), read where they lie.
#ifndef DG_Q_SF_K_MAJOR
#define DG_Q_SF_K_MAJOR 0
#endif
#ifndef DG_KV_SF_K_MAJOR
#define DG_KV_SF_K_MAJOR 0
#endif
#ifndef DG_QK_FP4
#define DG_QK_FP4 0
#endif
#ifndef DG_LOGITS_FP32
#define DG_LOGITS_FP32 1
#endif
#if DG_LOGITS_FP32
using LogitT = float;
#else
using LogitT = bfloat16_t;
#endif
// The score tiles FixPipe hands to the vector cores: BF16 (ReLU, then F322BF16 on the way out of L0C: half
// FixPipe's output bytes and the UB stages) where the logits are BF16, as DeepGEMM-Ascend's indexer rounds
// them; FP32 (NVIDIA DeepGEMM's form) where the logits are FP32, as NVIDIA's kernel keeps them: a short row
// whose heads cancel misses upstream's tolerance with BF16 scores. BF16, not FP16: an E4M3 dot product over
// 128 dims reaches 448 * 448 * 128, past FP16's range.
#ifndef DG_SCORES_BF16
#define DG_SCORES_BF16 (!DG_LOGITS_FP32)
#endif
#if DG_SCORES_BF16
using ScoreT = bfloat16_t;
#else
using ScoreT = float;
#endif

namespace dg_ascend {

#if DG_QK_FP4
using QkLoad = uint8_t;       // packed E2M1 pairs: the data movers copy bytes
using QkElem = fp4x2_e2m1_t;  // what the cube reads
constexpr uint32_t kQkPerUnit = 2;
#else
using QkLoad = fp8_e4m3fn_t;
using QkElem = fp8_e4m3fn_t;
constexpr uint32_t kQkPerUnit = 1;
#endif
static_assert(!DG_QK_FP4 || DG_MX, "FP4 operands carry per-32 scales (the MX product)");

constexpr uint32_t kHeads = DG_HEADS, kHeadDim = DG_HEAD_DIM, kQkRowBytes = kHeadDim / kQkPerUnit;
constexpr uint32_t kQRows = 128, kKvBlock = 256, kQkC0 = 32;  // bytes per fractal row (E4M3 32, E2M1 64 elements)
constexpr uint32_t kQTokens = kHeads >= kQRows ? 1 : kQRows / kHeads;
constexpr uint32_t kHalfCols = kKvBlock / 2;
// MX scales: int16 pairs (64 elements each; a 32-element head dim uses the low byte of one pair), in
// 16-row fractals of kQkPairs pairs
constexpr uint32_t kQkPairK = 64, kQkPairs = DG_MX ? (kHeadDim + kQkPairK - 1) / kQkPairK : 0;
constexpr uint32_t kQkL1A = kQRows * kQkRowBytes, kQkL1B = kKvBlock * kQkRowBytes;
constexpr uint32_t kQkL1SfA = kQRows * kQkPairs * 2, kQkL1SfB = kKvBlock * kQkPairs * 2;
// L1: two Q stages (values, MX scales), then two KV stages; a KV stage flips only when a tile needs
// another KV block than the one loaded (a core's tiles often share theirs: the persistent walk's stride
// is the grid), so a reused KV block costs no GM (L2) bytes again.
constexpr uint32_t kQkL1QStage = kQkL1A + kQkL1SfA, kQkL1KvStage = kQkL1B + kQkL1SfB;
constexpr uint32_t kQkL1Stage = kQkL1QStage + kQkL1KvStage;  // one Q and one KV stage
constexpr uint32_t kKvFreeFlag = 2;  // MTE1 -> MTE2 / MTE2 -> MTE1 ids 2, 3: the KV stages (0, 1: Q)
constexpr uint32_t kQkL0C = kQRows * kKvBlock;           // floats per L0C stage
constexpr uint32_t kScoreStage = kQRows * kHalfCols * sizeof(ScoreT);  // bytes of one UB stage
// UB behind the two score stages: the tile's weights (two stages, FP32 [token][head]), then the head sums
// (FP32 [token][kHalfCols]) the SIMT pass reads (mqa_logits.asc's SIMD rows use that space otherwise)
constexpr uint32_t kWeightStage = kQTokens * kHeads * 4 < 32 ? 32 : (kQTokens * kHeads * 4 + 31) / 32 * 32;
constexpr uint32_t kWeightsUb = 2 * kScoreStage, kSumsUb = kWeightsUb + 2 * kWeightStage;
static_assert(kHeads >= 1 && kHeads <= kQRows, "1 to 128 heads (one token's heads fit one tile)");
static_assert(kQkRowBytes % kQkC0 == 0 && kHeadDim <= 128, "head dim a multiple of 32 (FP4: 64), at most 128");
static_assert(2 * kQkL1Stage <= 512 * 1024, "Q / KV stages exceed L1");
static_assert(kL1Stages == 2, "cube_gemm.h's two L1 stage flags (MTE1 -> MTE2 0, 1) beside the KV stages' 2, 3");
static_assert(2 * kQkL1A <= 64 * 1024 && 2 * kQkL1B <= 64 * 1024, "stages exceed L0A / L0B");
static_assert(kSumsUb + kQTokens * kHalfCols * 4 <= 248 * 1024, "score stages, weights and sums exceed UB");
static_assert(2 * kQkL0C * 4 <= 256 * 1024, "two score tiles exceed L0C");
// the flag helpers of cube_gemm.h set up kL0CStages L0C stages; this header alternates two
static_assert(kL0CStages == 2, "cube_gemm.h's defaults (two L0C stages) with the MQA kernels");

// The cube core's memories for one tile, from the null-based bases the kernel source passes.
struct QkBuffers {
  __cbuf__ uint8_t* l1;
  __ca__ uint8_t* l0a;
  __cb__ uint8_t* l0b;
  __cc__ float* l0c;
  uint32_t s_l1 = 0, s_l0 = 0, s_l0c = 0, s_ub = 0;
  uint32_t s_kv = 0;           // the KV stage holding kv_key's block
  int64_t kv_key = -1;         // which KV block (kernel-defined key) the stage holds; -1: none yet
  bool kv_fresh = false;       // loaded for this tile: the MTE1 side still waits for its MTE2
  __aicore__ inline __cbuf__ uint8_t* q_stage() const { return l1 + s_l1 * kQkL1QStage; }
  __aicore__ inline __cbuf__ uint8_t* kv_stage() const { return l1 + 2 * kQkL1QStage + s_kv * kQkL1KvStage; }
  __aicore__ inline __cbuf__ QkLoad* q_l1() const { return (__cbuf__ QkLoad*)q_stage(); }
  __aicore__ inline __cbuf__ QkLoad* kv_l1() const { return (__cbuf__ QkLoad*)kv_stage(); }
  __aicore__ inline __cbuf__ uint16_t* q_sf_l1() const { return (__cbuf__ uint16_t*)(q_stage() + kQkL1A); }
  __aicore__ inline __cbuf__ uint16_t* kv_sf_l1() const { return (__cbuf__ uint16_t*)(kv_stage() + kQkL1B); }
};

// `rows` rows of E4M3 or packed E2M1 (kQkRowBytes each, `ld` bytes apart) into rows [r0, r0 + rows) of
// an NZ tile of `tile_rows` rows in L1.
__aicore__ inline void load_rows_nz(__cbuf__ QkLoad* tile, uint32_t r0, __gm__ QkLoad* src, int64_t ld,
                                    uint32_t rows, uint32_t tile_rows) {
  asc_set_gm2l1_nz_para(1, 1, static_cast<uint16_t>(tile_rows), 0);
  asc_copy_gm2l1_nd2nz(tile + r0 * kQkC0, src, uint64_t(ld), static_cast<asc_load_l2_cache_mode>(0),
                       static_cast<uint16_t>(rows), kQkRowBytes, 0, false);
}

// MX scales of rows [r0, r0 + rows) (int16 pairs, pair p of row r at sf[p * ld + r], or with kKMajor at
// sf[r * ld + p]: the caller's packed rows, loaded DN->NZ) into a 16-row-fractal tile of kQkPairs pairs per
// fractal column.
template <bool kKMajor = false>
__aicore__ inline void load_sf_nz(__cbuf__ uint16_t* tile, __gm__ uint16_t* sf, int64_t ld, int64_t r0,
                                  uint32_t rows) {
  asc_set_gm2l1_nz_para(1, 1, static_cast<uint16_t>(kQkPairs), 0);
  if constexpr (kKMajor) {
    asc_copy_gm2l1_dn2nz(tile, sf + r0 * ld, uint64_t(ld) * 2, static_cast<asc_load_l2_cache_mode>(0),
                         static_cast<uint16_t>(kQkPairs), rows, 0, false);
  } else {
    asc_copy_gm2l1_nd2nz(tile, sf + r0, uint64_t(ld) * 2, static_cast<asc_load_l2_cache_mode>(0),
                         static_cast<uint16_t>(kQkPairs), rows, 0, false);
  }
}

// Before a tile's loads: the L1 stage is free.
__aicore__ inline void qk_begin(QkBuffers& b) { asc_sync_wait(PIPE_MTE1, PIPE_MTE2, b.s_l1); }

// Whether the tile's KV block (`key`, unique per block content) must be loaded into b.kv_l1() /
// b.kv_sf_l1(): not when the current KV stage already holds it. Otherwise the stage in use is released
// (its MTE1 reads were issued before) and the other one acquired.
__aicore__ inline bool qk_kv_begin(QkBuffers& b, int64_t key) {
  if (key == b.kv_key) return false;
  if (b.kv_key >= 0) asc_sync_notify(PIPE_MTE1, PIPE_MTE2, kKvFreeFlag + b.s_kv);
  b.s_kv ^= 1;
  asc_sync_wait(PIPE_MTE1, PIPE_MTE2, kKvFreeFlag + b.s_kv);
  b.kv_key = key;
  b.kv_fresh = true;
  return true;
}

// The KV stages' flags: both free at the start (after gemm_flags_init); at the end the stage in use is
// released and both free flags consumed (before gemm_flags_drain).
__aicore__ inline void qk_kv_flags_init() {
  asc_sync_notify(PIPE_MTE1, PIPE_MTE2, kKvFreeFlag);
  asc_sync_notify(PIPE_MTE1, PIPE_MTE2, kKvFreeFlag + 1);
}
__aicore__ inline void qk_kv_flags_drain(const QkBuffers& b) {
  if (b.kv_key >= 0) asc_sync_notify(PIPE_MTE1, PIPE_MTE2, kKvFreeFlag + b.s_kv);
  asc_sync_wait(PIPE_MTE1, PIPE_MTE2, kKvFreeFlag);
  asc_sync_wait(PIPE_MTE1, PIPE_MTE2, kKvFreeFlag + 1);
}

// After the tile's Q rows (kQRows-row NZ tile) and KV rows (kKvBlock-row NZ tile) were loaded into the
// current L1 stage: scores = Q . KV^T for m16 x n16 into an L0C stage, FixPipe'd into UB stage b.s_ub
// of both vector cores (SPLIT_N). The caller flips b.s_ub after the cross-core arrive.
__aicore__ inline void qk_scores_to_ub(QkBuffers& b, __ubuf__ ScoreT* ub_stage, uint32_t m16, uint32_t n16) {
  constexpr uint8_t k_steps = kQkRowBytes / kQkC0;
  asc_sync_notify(PIPE_MTE2, PIPE_MTE1, b.s_l1);
  asc_sync_wait(PIPE_MTE2, PIPE_MTE1, b.s_l1);
  if (b.kv_fresh) {
    asc_sync_notify(PIPE_MTE2, PIPE_MTE1, kKvFreeFlag + b.s_kv);
    asc_sync_wait(PIPE_MTE2, PIPE_MTE1, kKvFreeFlag + b.s_kv);
    b.kv_fresh = false;
  }
  __ca__ QkElem* a0 = (__ca__ QkElem*)(b.l0a + b.s_l0 * kQkL1A);
  __cb__ QkElem* b0 = (__cb__ QkElem*)(b.l0b + b.s_l0 * kQkL1B);
  __cc__ float* acc = b.l0c + b.s_l0c * kQkL0C;
  asc_sync_wait(PIPE_M, PIPE_MTE1, b.s_l0);
  asc_copy_l12l0a(a0, (__cbuf__ QkElem*)b.q_l1(), 0, 0, static_cast<uint8_t>(m16 / 16), k_steps, static_cast<int16_t>(kQRows / 16),
                  static_cast<uint16_t>(m16 / 16));
  asc_copy_l12l0b(b0, (__cbuf__ QkElem*)b.kv_l1(), 0, 0, static_cast<uint8_t>(n16 / 16), k_steps, static_cast<int16_t>(kKvBlock / 16),
                  static_cast<uint16_t>(n16 / 16));
#if DG_MX
  asc_copy_l12l0a_mx(uint64_t(uintptr_t(a0)) / 16, (__cbuf__ fp8_e8m0_t*)b.q_sf_l1(), 0, 0,
                     static_cast<uint8_t>(m16 / 16), kQkPairs, kQkPairs, kQkPairs);
  asc_copy_l12l0b_mx(uint64_t(uintptr_t(b0)) / 16, (__cbuf__ fp8_e8m0_t*)b.kv_sf_l1(), 0, 0,
                     static_cast<uint8_t>(n16 / 16), kQkPairs, kQkPairs, kQkPairs);
#endif
  asc_sync_notify(PIPE_MTE1, PIPE_MTE2, b.s_l1);
  asc_sync_notify(PIPE_MTE1, PIPE_M, b.s_l0);
  asc_sync_wait(PIPE_MTE1, PIPE_M, b.s_l0);
  asc_sync_wait(PIPE_FIX, PIPE_M, b.s_l0c);
#if DG_MX
  asc_mmad_mx(acc, a0, b0, static_cast<uint16_t>(m16), static_cast<uint16_t>(kHeadDim), static_cast<uint16_t>(n16), 0,
              true, false, true);
#else
  asc_mmad(acc, a0, b0, static_cast<uint16_t>(m16), static_cast<uint16_t>(kHeadDim), static_cast<uint16_t>(n16), 0,
           true, false, true);
#endif
  asc_sync_notify(PIPE_M, PIPE_MTE1, b.s_l0);
  asc_sync_notify(PIPE_M, PIPE_FIX, b.s_l0c);
  asc_sync_wait(PIPE_M, PIPE_FIX, b.s_l0c);
  asc_sync_intra_wait(PIPE_FIX, b.s_ub);
  asc_sync_intra_wait(PIPE_FIX, 16 + b.s_ub);
  asc_set_l0c_copy_nz_para(1, 0, 0);
  asc_copy_l0c2ub(ub_stage, acc, static_cast<uint16_t>(n16), static_cast<uint16_t>(m16), kHalfCols,
                  static_cast<uint16_t>(m16), 0, asc_dual_dst_mode::SPLIT_N, static_cast<asc_unit_flag_mode>(0),
                  DG_SCORES_BF16 ? asc_quant_mode::F322BF16 : asc_quant_mode::NoQuant,
                  static_cast<asc_relu_pre_mode>(1), false, true, false, 0);  // relu_pre 1: the normal ReLU
  asc_sync_notify(PIPE_FIX, PIPE_M, b.s_l0c);
  asc_sync_intra_arrive(PIPE_FIX, b.s_ub);
  asc_sync_intra_arrive(PIPE_FIX, 16 + b.s_ub);
  b.s_l1 ^= 1;
  b.s_l0 ^= 1;
  b.s_l0c ^= 1;
  b.s_ub ^= 1;
}

// The cube core's last waits: both UB stages handed back by both vector cores.
__aicore__ inline void qk_drain_ub() {
  for (uint32_t s = 0; s < 2; ++s) {
    asc_sync_intra_wait(PIPE_FIX, s);
    asc_sync_intra_wait(PIPE_FIX, 16 + s);
  }
}

// Vector side, start: both UB stages free for the cube core, both weight stages free for MTE2.
__aicore__ inline void logits_begin() {
  asc_sync_intra_arrive(PIPE_V, 0);
  asc_sync_intra_arrive(PIPE_V, 1);
  asc_sync_notify(PIPE_V, PIPE_MTE2, 0);
  asc_sync_notify(PIPE_V, PIPE_MTE2, 1);
}
// ... and end: the weight stages' flags consumed.
__aicore__ inline void logits_end() {
  asc_sync_wait(PIPE_V, PIPE_MTE2, 0);
  asc_sync_wait(PIPE_V, PIPE_MTE2, 1);
}

// SIMD: acc = sum_h w[t][h] * score[(t, h), :] over the stage's kHalfCols columns for token t of the tile
// (FixPipe applied the ReLU), heads in order with fused multiply-adds in FP32. Per head one broadcast weight
// load, the score row (BF16: one register, widened in its even and odd halves, so acc0 / acc1 hold the even
// / odd columns; FP32: two registers, columns [0, 64) / [64, 128)), two multiply-adds. Columns past the
// core's share are summed too (stale UB); nothing keeps them.
__simd_callee__ inline void head_sum_regs(vector_float& acc0, vector_float& acc1, __ubuf__ ScoreT* scores,
                                          __ubuf__ float* w, uint32_t t) {
  // every lane of either width: asc-devkit documents the conversions' mask as the source operand's (BF16)
  const vector_bool all = asc_create_mask_b16(PAT_ALL);
  vector_float wv, lo, hi;
  asc_duplicate_scalar(acc0, 0.0f, all);
  asc_duplicate_scalar(acc1, 0.0f, all);
  for (uint32_t h = 0; h < kHeads; ++h) {
    asc_loadalign_brc_elem(wv, w, int32_t(t * kHeads + h));
#if DG_SCORES_BF16
    vector_bfloat16_t sc;
    asc_loadalign(sc, scores, int32_t((t * kHeads + h) * kHalfCols));
    asc_bfloat162float(lo, sc, all);
    asc_bfloat162float_v2(hi, sc, all);
#else
    asc_loadalign(lo, scores, int32_t((t * kHeads + h) * kHalfCols));
    asc_loadalign(hi, scores, int32_t((t * kHeads + h) * kHalfCols + 64));
#endif
    asc_mula(acc0, lo, wv, all);
    asc_mula(acc1, hi, wv, all);
  }
}
static_assert(kHalfCols == 128, "head_sum_regs covers a stage row with two FP32 registers");

// The head sums of the tile's `tokens` tokens, FP32 [token][kHalfCols] in natural column order.
__simd_vf__ inline void head_sums_vf(__ubuf__ ScoreT* scores, __ubuf__ float* w, __ubuf__ float* sums, uint32_t tokens) {
  for (uint32_t t = 0; t < tokens; ++t) {
    vector_float acc0, acc1;
    head_sum_regs(acc0, acc1, scores, w, t);
#if DG_SCORES_BF16
    asc_storealign_intlv(sums, acc0, acc1, int32_t(t * kHalfCols));
#else
    const vector_bool all = asc_create_mask_b32(PAT_ALL);
    asc_storealign(sums + t * kHalfCols, acc0, all);
    asc_storealign(sums + t * kHalfCols + 64, acc1, all);
#endif
  }
}

// A tile's inputs of the vector side: its `tokens` weight rows (FP32, `weights` at the tile's first token)
// to weight stage u by MTE2 (with `extra_bytes` more from `extra` to `extra_ub`, which the same flags
// guard), then the scores of UB stage u and those loads waited for. tile_inputs_end hands both stages back
// (the cube core's score stage, MTE2's weight stage) once the vector core read them; the caller flips u.
__aicore__ inline __ubuf__ float* tile_inputs_begin(__ubuf__ uint8_t* ub, uint32_t u, __gm__ float* weights,
                                                   uint32_t tokens, __ubuf__ float* extra_ub = nullptr,
                                                   __gm__ float* extra = nullptr, uint32_t extra_bytes = 0) {
  __ubuf__ float* w = (__ubuf__ float*)(ub + kWeightsUb + u * kWeightStage);
  const uint32_t bytes = tokens * kHeads * 4;
  asc_sync_wait(PIPE_V, PIPE_MTE2, u);  // their last reader, the vector work of two tiles back, ran
  asc_copy_gm2ub_align(w, weights, 1, bytes, 0, 0, 0, asc_load_l2_cache_mode::NORMAL_FIRST_VICTIM, bytes, bytes);
  if (extra_bytes)
    asc_copy_gm2ub_align(extra_ub, extra, 1, extra_bytes, 0, 0, 0, asc_load_l2_cache_mode::NORMAL_FIRST_VICTIM,
                         extra_bytes, extra_bytes);
  asc_sync_notify(PIPE_MTE2, PIPE_V, u);
  asc_sync_intra_wait(PIPE_V, u);
  asc_sync_wait(PIPE_MTE2, PIPE_V, u);
  return w;
}
__aicore__ inline void tile_inputs_end(uint32_t u) {
  asc_sync_intra_arrive(PIPE_V, u);
  asc_sync_notify(PIPE_V, PIPE_MTE2, u);
}

// A tile's head sums into the sums buffer (kSumsUb) for the SIMT pass.
__aicore__ inline void tile_head_sums(__ubuf__ uint8_t* ub, uint32_t u, __gm__ float* weights, uint32_t tokens) {
  __ubuf__ float* w = tile_inputs_begin(ub, u, weights, tokens);
  head_sums_vf((__ubuf__ ScoreT*)(ub + u * kScoreStage), w, (__ubuf__ float*)(ub + kSumsUb), tokens);
  tile_inputs_end(u);
}

// The SIMT helpers below are __simt_callee__ functions (what a SIMT VF may call), so they take
// built-in types and pointers only.
// Through asc_stcg (written once, never re-read: L2 only), which the twin counts as GM bytes.
__simt_callee__ inline void store_logit(__gm__ LogitT* p, float v) {
  LogitT w;
  if constexpr (DG_LOGITS_FP32) w = v;
  else w = __float2bfloat16_rn(v);
  asc_stcg(p, w);
}

// One logit (or -inf) of KV position p in the logits row `row` of a token whose positions
// [start, end) are written at column p - shift (compressed rows: shift = start); `width` bounds the
// columns of the logits view; `computed`: `value` holds the logit (its tile had cube work).
__simt_callee__ inline void write_logit(__gm__ LogitT* row, int64_t p, int64_t start, int64_t end, int64_t shift,
                                        int64_t width, bool clean, bool computed, float value) {
  if (p >= start && p < end && computed) {
    if (p - shift < width) store_logit(row + (p - shift), value);
  } else if (clean && p < width) {
    store_logit(row + p, -__builtin_inff());
  }
}

}  // namespace dg_ascend
