// deep_gemm/ascend/mega_swiglu.h — Mega MoE's SwiGLU step on the vector cores, described in mega_swiglu.asc.
#pragma once

#include <deep_gemm/ascend/kernel_args.h>

namespace dg_swiglu {

constexpr uint32_t kStep = 256;   // output columns an FP8 step covers (four FP32 registers)
constexpr uint32_t kBf16Step = 128;
constexpr float kAmaxFloor = 1e-4f;  // deep_gemm.utils.math.AMAX_FLOOR, as FP32

__aicore__ inline float bits_float(uint32_t b) {
  union {
    uint32_t u;
    float f;
  } v{b};
  return v.f;
}

// UB gather indices (BF16 elements from a step's first L1 column) of the gate and up value of output column
// `col` (int16 lanes): gate = 2 * col - col % gran, up = gate + gran. Columns within a step: gran <= 128 divides
// the step's start, so the step's offset is 2 * its first column for every lane.
__simd_callee__ inline void gate_up_index(vector_uint16_t& gate, vector_uint16_t& up, vector_int16_t col,
                                          int16_t gran, vector_bool all) {
  vector_int16_t low, twice, g;
  asc_duplicate_scalar(low, int16_t(gran - 1), all);
  asc_and(low, col, low, all);
  asc_add(twice, col, col, all);
  asc_sub(g, twice, low, all);
  gate = (vector_uint16_t&)g;
  asc_add_scalar(g, g, gran, all);
  up = (vector_uint16_t&)g;
}

// x = act of FP32 gate / up lanes times the row's weight, in the reference's order ((g * sigmoid(g)) * u) * w.
// The clamp keeps NaN (torch's clamp does; the register min / max may drop it, which the docs leave open).
__simd_callee__ inline void act_regs(vector_float& x, vector_float g, vector_float u, vector_float wv, bool clamp_on,
                                     float clamp, vector_bool all) {
  if (clamp_on) {
    vector_bool nan;
    vector_float t;
    asc_ne(nan, g, g, all);
    asc_min_scalar(t, g, clamp, all);
    asc_select(g, g, t, nan);
    asc_ne(nan, u, u, all);
    asc_max_scalar(t, u, -clamp, all);
    asc_min_scalar(t, t, clamp, all);
    asc_select(u, u, t, nan);
  }
  vector_float e, s, one;
  asc_duplicate_scalar(one, 1.0f, all);
  asc_neg(e, g, all);
  asc_exp(e, e, all);
  asc_add_scalar(e, e, 1.0f, all);
  asc_div(s, one, e, all);
  asc_mul(x, g, s, all);
  asc_mul(x, x, u, all);
  asc_mul(x, x, wv, all);
}

// Gate / up of the 128 columns one BF16 index pair names, widened (even BF16 lanes to lo, odd to hi) and
// turned into act.
__simd_callee__ inline void gather_act(vector_float& lo, vector_float& hi, __ubuf__ bfloat16_t* src,
                                       vector_uint16_t gate_idx, vector_uint16_t up_idx, vector_bool live16,
                                       vector_float wv, bool clamp_on, float clamp) {
  const vector_bool all16 = asc_create_mask_b16(PAT_ALL);  // widening: the BF16 source's lanes
  const vector_bool all32 = asc_create_mask_b32(PAT_ALL);
  vector_bfloat16_t gb, ub;
  asc_gather(gb, src, gate_idx, live16);  // lanes past live16 are 0: finite act, never stored
  asc_gather(ub, src, up_idx, live16);
  vector_float g, u;
  asc_bfloat162float(g, gb, all16);
  asc_bfloat162float(u, ub, all16);
  act_regs(lo, g, u, wv, clamp_on, clamp, all32);
  asc_bfloat162float_v2(g, gb, all16);
  asc_bfloat162float_v2(u, ub, all16);
  act_regs(hi, g, u, wv, clamp_on, clamp, all32);
}

// FP8: `rows` rows of `in` (2 * inter BF16 each) to `out` (inter bytes each) and their scale words to `sf`
// (sf_pitch words a row).
__simd_vf__ inline void swiglu_fp8_vf(__ubuf__ bfloat16_t* in, __ubuf__ float* w, __ubuf__ uint8_t* out,
                                      __ubuf__ uint32_t* sf, uint32_t rows, uint32_t inter, uint32_t sf_pitch,
                                      uint32_t gran, uint32_t clamp_on, float clamp) {
  const vector_bool all16 = asc_create_mask_b16(PAT_ALL), all32 = asc_create_mask_b32(PAT_ALL);
  const vector_bool lo4 = asc_create_mask_b32(PAT_VL4), lo8 = asc_create_mask_b32(PAT_VL8);
  vector_bool hi4;
  asc_xor(hi4, lo8, lo4, all32);  // lanes 4..7: the step's second scale word
  // BF16 lane 2k + e of pair q gathers column 4k + 2q + e: its even / odd widenings are registers 2q / 2q + 1
  vector_uint16_t gate_idx[2], up_idx[2];
  {
    vector_int16_t lane, odd, col;
    asc_arange(lane, int16_t(0));
    asc_duplicate_scalar(odd, int16_t(1), all16);
    asc_and(odd, lane, odd, all16);
    asc_add(col, lane, lane, all16);
    asc_sub(col, col, odd, all16);
    for (int q = 0; q < 2; ++q) {
      vector_int16_t c;
      asc_add_scalar(c, col, int16_t(2 * q), all16);
      gate_up_index(gate_idx[q], up_idx[q], c, int16_t(gran), all16);
    }
  }
  vector_int32_t lane32, shift;
  asc_arange(lane32, 0);
  vector_uint32_t block;  // lane k belongs to block k / 8 (its datablock)
  asc_shiftright_scalar(block, (vector_uint32_t&)lane32, int16_t(3), all32);
  asc_duplicate_scalar(shift, 3, all32);  // scale byte j of a word at bit 8 * (j % 4)
  asc_and(shift, lane32, shift, all32);
  asc_shiftleft_scalar(shift, shift, int16_t(3), all32);
  vector_int32_t mant_mask, c255, c254;
  asc_duplicate_scalar(mant_mask, 0x7FFFFF, all32);
  asc_duplicate_scalar(c255, 255, all32);
  asc_duplicate_scalar(c254, 254, all32);
  vector_float inf;
  asc_duplicate_scalar(inf, bits_float(0x7F800000u), all32);
  vector_uint32_t byte_mask[4], nan_code[4];
  for (int p = 0; p < 4; ++p) {
    asc_duplicate_scalar(byte_mask[p], uint32_t(0xFFu << (8 * p)), all32);
    asc_duplicate_scalar(nan_code[p], uint32_t(0x7Fu << (8 * p)), all32);  // E4M3FN NaN (any NaN matches one)
  }

  for (uint32_t r = 0; r < rows; ++r) {
    vector_float wv;
    asc_loadalign_brc_elem(wv, w, int32_t(r));
    for (uint32_t c0 = 0; c0 < inter; c0 += kStep) {
      const uint32_t n = inter - c0 < kStep ? inter - c0 : kStep;
      uint32_t n16 = n / 2, n8 = n;
      const vector_bool live16 = asc_update_mask_b16(n16), live8 = asc_update_mask_b8(n8);
      __ubuf__ bfloat16_t* src = in + r * 2 * inter + 2 * c0;
      vector_float x[4];
      gather_act(x[0], x[1], src, gate_idx[0], up_idx[0], live16, wv, clamp_on != 0, clamp);
      gather_act(x[2], x[3], src, gate_idx[1], up_idx[1], live16, wv, clamp_on != 0, clamp);
      // block amax with NaN as inf (both give the byte 254; the register max may drop NaN)
      vector_bool nan[4];
      vector_float amax;
      for (int p = 0; p < 4; ++p) {
        vector_float a;
        asc_ne(nan[p], x[p], x[p], all32);
        asc_abs(a, x[p], all32);
        asc_select(a, inf, a, nan[p]);
        if (p == 0) amax = a;
        else asc_max(amax, amax, a, all32);
      }
      asc_reduce_max_datablock(amax, amax, all32);  // lane j: block j's amax
      asc_max_scalar(amax, amax, kAmaxFloor, all32);
      vector_int32_t bits = (vector_int32_t&)amax, exp, mant, byte, up;
      asc_shiftright_scalar(exp, bits, int16_t(23), all32);
      asc_and(mant, bits, mant_mask, all32);
      asc_add_scalar(byte, exp, -8, all32);
      asc_add_scalar(up, byte, 1, all32);
      vector_bool above, special;
      asc_gt_scalar(above, mant, 0x600000, all32);  // mantissa past 1.75
      asc_select(byte, up, byte, above);
      asc_eq_scalar(special, exp, 255, all32);
      asc_select(byte, c254, byte, special);
      // 2^(128 - byte) per block, spread to the block's lanes
      vector_int32_t factor;
      asc_sub(factor, c255, byte, all32);
      asc_shiftleft_scalar(factor, factor, int16_t(23), all32);
      vector_uint32_t spread;
      asc_gather(spread, (vector_uint32_t&)factor, block);
      vector_uint32_t bytes;
      for (int p = 0; p < 4; ++p) {
        vector_float q;
        asc_mul(q, x[p], (vector_float&)spread, all32);
        asc_muls(q, q, 0.5f, all32);
        // saturating: torch's cast gives +-448 for +-inf (its overflow cannot happen below the scale); NaN,
        // which saturation zeroes, is put back
        vector_fp8_e4m3fn_t code;
        if (p == 0) asc_float2e4m3_rn_sat(code, q, all32);
        if (p == 1) asc_float2e4m3_rn_sat_v2(code, q, all32);
        if (p == 2) asc_float2e4m3_rn_sat_v3(code, q, all32);
        if (p == 3) asc_float2e4m3_rn_sat_v4(code, q, all32);
        vector_uint32_t part = (vector_uint32_t&)code;
        asc_select(part, nan_code[p], part, nan[p]);
        asc_and(part, part, byte_mask[p], all32);  // the byte quarter p holds; the docs leave the others open
        if (p == 0) bytes = part;
        else asc_or(bytes, bytes, part, all32);
      }
      asc_storealign(out + r * inter + c0, (vector_uint8_t&)bytes, live8);
      // scale words: byte j of the step at bits 8 * (j % 4) of word j / 4 (disjoint bits: the sum is the OR)
      vector_uint32_t word;
      asc_shiftleft((vector_uint32_t&)byte, (vector_uint32_t&)byte, shift, all32);
      asc_reduce_sum(word, (vector_uint32_t&)byte, lo4);
      asc_storealign_1st(sf + r * sf_pitch + c0 / 128, word);
      if (n == kStep) {
        asc_reduce_sum(word, (vector_uint32_t&)byte, hi4);
        asc_storealign_1st(sf + r * sf_pitch + c0 / 128 + 1, word);
      }
    }
  }
}

// BF16: `rows` rows of `in` to `out` (inter BF16 each), 128 columns a step in natural order (lane j of the
// gathered pair is column j; its even / odd widenings narrow back into the even / odd BF16 elements).
__simd_vf__ inline void swiglu_bf16_vf(__ubuf__ bfloat16_t* in, __ubuf__ float* w, __ubuf__ bfloat16_t* out,
                                       uint32_t rows, uint32_t inter, uint32_t gran, uint32_t clamp_on, float clamp) {
  const vector_bool all16 = asc_create_mask_b16(PAT_ALL), all32 = asc_create_mask_b32(PAT_ALL);
  vector_uint16_t gate_idx, up_idx;
  {
    vector_int16_t col;
    asc_arange(col, int16_t(0));
    gate_up_index(gate_idx, up_idx, col, int16_t(gran), all16);
  }
  vector_uint32_t low_half, high_half;
  asc_duplicate_scalar(low_half, 0xFFFFu, all32);
  asc_duplicate_scalar(high_half, 0xFFFF0000u, all32);
  for (uint32_t r = 0; r < rows; ++r) {
    vector_float wv;
    asc_loadalign_brc_elem(wv, w, int32_t(r));
    for (uint32_t c0 = 0; c0 < inter; c0 += kBf16Step) {
      vector_float even, odd;
      gather_act(even, odd, in + r * 2 * inter + 2 * c0, gate_idx, up_idx, all16, wv, clamp_on != 0, clamp);
      vector_bfloat16_t be, bo;
      asc_float2bfloat16_rn(be, even, all32);
      asc_float2bfloat16_rn_v2(bo, odd, all32);
      vector_uint32_t lo = (vector_uint32_t&)be, hi = (vector_uint32_t&)bo;
      asc_and(lo, lo, low_half, all32);  // element 2k is lane k's low half, 2k + 1 its high half
      asc_and(hi, hi, high_half, all32);
      asc_or(lo, lo, hi, all32);
      asc_storealign((__ubuf__ uint32_t*)(out + r * inter + c0), lo, all32);
    }
  }
}

__aicore__ inline uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }
__aicore__ inline uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
__aicore__ inline uint32_t align32(uint32_t a) { return (a + 31) / 32 * 32; }

// The groups' rows as tiles of `tile_rows`, numbered group by group; seek only moves forward (tiles are asked
// for in increasing order), so a core reads each end once.
struct GroupRows {
  __gm__ int32_t* ends;
  uint32_t num_groups, alignment, m, tile_rows = 1;
  uint32_t g = 0, start = 0, end = 0, first = 0, tiles = 0;

  // group g's [start, end) from the previous group's end
  __aicore__ inline void load() {
    const int32_t value = ends[g];
    end = value < 0 ? 0 : min_u32(uint32_t(value), m);
    if (end < start) end = start;
    tiles = ceil_div(end - start, tile_rows);
  }
  __aicore__ inline void next_group() {
    const uint64_t aligned = uint64_t(ceil_div(end, alignment)) * alignment;
    first += tiles;
    start = aligned > m ? m : uint32_t(aligned);
    ++g;
    if (g < num_groups) load();
  }
  __aicore__ inline void restart(uint32_t rows_a_tile) {
    tile_rows = rows_a_tile;
    g = start = end = first = 0;
    load();
  }
  // All the groups' rows (a first pass, which sizes the tiles).
  __aicore__ inline uint32_t total_rows() {
    restart(1);
    uint32_t total = 0;
    for (; g < num_groups; next_group()) total += end - start;
    return total;
  }
  // Tile t's first row and row count; false past the last tile.
  __aicore__ inline bool seek(uint32_t t, uint32_t& r0, uint32_t& nr) {
    while (g < num_groups && t >= first + tiles) next_group();
    if (g >= num_groups) return false;
    r0 = start + (t - first) * tile_rows;
    nr = min_u32(end - r0, tile_rows);
    return true;
  }
};

// Rows [r0, r0 + nr) of l1_out (in_row bytes each) and their weights into input stage s once it is free.
__aicore__ inline void load_tile(const DgMegaSwigluArgs& kargs, __ubuf__ uint8_t* stage, uint32_t r0, uint32_t nr,
                                 uint32_t s, uint32_t in_row, uint32_t max_rows) {
  asc_sync_wait(PIPE_V, PIPE_MTE2, s);
  asc_copy_gm2ub_align((__ubuf__ bfloat16_t*)stage, kargs.l1_out + int64_t(r0) * (in_row / 2),
                       static_cast<uint16_t>(nr), in_row, 0, 0, 0, asc_load_l2_cache_mode::NORMAL_FIRST_VICTIM, in_row,
                       in_row);
  asc_copy_gm2ub_align((__ubuf__ float*)(stage + max_rows * in_row), kargs.weights + r0, 1, 4 * nr, 0, 0, 0,
                       asc_load_l2_cache_mode::NORMAL_FIRST_VICTIM, 4 * nr, 4 * nr);
  asc_sync_notify(PIPE_MTE2, PIPE_V, s);
}

// The step as vector core `block` of `grid` runs it (the SwiGLU launch's blocks, or mega_moe.asc's workers).
// ub: the core's UB (the entry's (__ubuf__ uint8_t*)0, which the twin maps per core).
__aicore__ inline void swiglu_run(const DgMegaSwigluArgs& kargs, uint32_t block, uint32_t grid, __ubuf__ uint8_t* ub) {
  const uint32_t m = uint32_t(kargs.m), inter = uint32_t(kargs.inter), max_rows = uint32_t(kargs.max_tile_rows);
  const bool fp8 = kargs.to_fp8 != 0;
  // the rows to compute: the groups' rows, from device values the host never checks (clamped in GroupRows)
  const uint32_t alignment = kargs.alignment < 1 ? 1u : uint32_t(kargs.alignment);
  GroupRows groups{(__gm__ int32_t*)kargs.ends, uint32_t(kargs.num_groups), alignment, m};
  const uint32_t rows = groups.total_rows();
  // as many rows a tile as spreads them over the grid, at most what the UB stages hold
  groups.restart(rows == 0 ? 1 : min_u32(max_rows, ceil_div(rows, grid)));
  // UB: two input stages (tile rows of 2 * inter BF16, then their weights), two output stages (act, then the
  // FP8 scale words, sf_pitch a row)
  const uint32_t in_row = 4 * inter, out_row = fp8 ? inter : 2 * inter, sf_row = inter / 32;
  const uint32_t sf_pitch = align32(sf_row) / 4;
  const uint32_t w_stage = align32(4 * max_rows);
  const uint32_t in_stage = max_rows * in_row + w_stage;
  const uint32_t out_stage = max_rows * out_row + (fp8 ? max_rows * sf_pitch * 4 : 0);
  __ubuf__ uint8_t* in_ub[2] = {ub, ub + in_stage};
  __ubuf__ uint8_t* out_ub[2] = {ub + 2 * in_stage, ub + 2 * in_stage + out_stage};

  asc_sync_notify(PIPE_V, PIPE_MTE2, 0);
  asc_sync_notify(PIPE_V, PIPE_MTE2, 1);
  asc_sync_notify(PIPE_MTE3, PIPE_V, 0);
  asc_sync_notify(PIPE_MTE3, PIPE_V, 1);
  uint32_t t = block, r0 = 0, nr = 0, next_r0 = 0, next_nr = 0;
  bool live = groups.seek(t, r0, nr);
  if (live) load_tile(kargs, in_ub[0], r0, nr, 0, in_row, max_rows);
  for (uint32_t s = 0; live; t += grid, s ^= 1, r0 = next_r0, nr = next_nr) {
    const bool next_live = groups.seek(t + grid, next_r0, next_nr);
    if (next_live)  // the next tile's bytes move while this one computes
      load_tile(kargs, in_ub[s ^ 1], next_r0, next_nr, s ^ 1, in_row, max_rows);
    __ubuf__ bfloat16_t* in = (__ubuf__ bfloat16_t*)in_ub[s];
    __ubuf__ float* w = (__ubuf__ float*)(in_ub[s] + max_rows * in_row);
    __ubuf__ uint32_t* sf = (__ubuf__ uint32_t*)(out_ub[s] + max_rows * out_row);
    asc_sync_wait(PIPE_MTE2, PIPE_V, s);
    asc_sync_wait(PIPE_MTE3, PIPE_V, s);
    const uint32_t gran = uint32_t(kargs.gran), clamp_on = uint32_t(kargs.has_clamp);
    if (fp8)
      swiglu_fp8_vf(in, w, out_ub[s], sf, nr, inter, sf_pitch, gran, clamp_on, kargs.clamp);
    else
      swiglu_bf16_vf(in, w, (__ubuf__ bfloat16_t*)out_ub[s], nr, inter, gran, clamp_on, kargs.clamp);
    asc_sync_notify(PIPE_V, PIPE_MTE2, s);
    asc_sync_notify(PIPE_V, PIPE_MTE3, s);
    asc_sync_wait(PIPE_V, PIPE_MTE3, s);
    __gm__ uint8_t* act = (__gm__ uint8_t*)kargs.act + int64_t(r0) * out_row;
    asc_copy_ub2gm_align(act, out_ub[s], static_cast<uint16_t>(nr), out_row,
                         asc_store_l2_cache_mode::NORMAL_FIRST_VICTIM, out_row, out_row);
    if (fp8)
      asc_copy_ub2gm_align((__gm__ uint8_t*)kargs.act_sf + int64_t(r0) * sf_row, (__ubuf__ uint8_t*)sf,
                           static_cast<uint16_t>(nr), sf_row, asc_store_l2_cache_mode::NORMAL_FIRST_VICTIM, sf_row,
                           sf_pitch * 4);
    asc_sync_notify(PIPE_MTE3, PIPE_V, s);
    live = next_live;
  }
  asc_sync_wait(PIPE_V, PIPE_MTE2, 0);
  asc_sync_wait(PIPE_V, PIPE_MTE2, 1);
  asc_sync_wait(PIPE_MTE3, PIPE_V, 0);
  asc_sync_wait(PIPE_MTE3, PIPE_V, 1);
}

}  // namespace dg_swiglu
