// deep_gemm/ascend/m_grouped.h — the M-grouped GEMM's tile walk and cube part, D[rows of g] = A[rows of g] .
// B[g]^T, FixPipe straight to GM, shared by m_grouped_bf16_gemm.asc (cube only: BF16, or MX FP8 / FP4 with
// DG_MX), m_grouped_fp8_fp4_mx_gemm.asc (FP8 x packed FP4 B, widened into L1 by the block's vector cores) and
// Mega MoE's persistent kernel mega_moe.asc (its two layers).
//
// `layout` (int32 [G], device memory) is read by the kernel only (no host read):
//   psum: group g's exclusive end row (clamped to [start, M]); it starts at group g - 1's clamped end
//         aligned up (at most M; group 0 at 0). A, SFA and D are one [M, ..] matrix, rows global.
//   masked (DG_MASKED): group g's row count (clamped to [0, M], M = M_max); A, SFA and D are
//         [G, M, ..] with group strides *_group_stride, rows local to the group.
//   m_indices (DG_INDEXED): int32 [M], row r's group or -1, as deep_gemm.grouped labels rows: the
//         group of the first row of r's block of `alignment` rows, or -1 where that block is not
//         computed (its first row is -1) or, with DG_ZERO_PADDING, where r itself is padding. Rows
//         global, as psum. An M tile lies in one block (ceil(alignment / BLOCK_M) tiles per block), is
//         computed with its block's group (a value outside [0, G) counts as -1, so A and B are never
//         read outside) and skipped where that is -1; with DG_ZERO_PADDING uncomputed tiles and the
//         -1 rows of computed ones are written as zero (the latter after the tile's own store: both go
//         through FixPipe in order, so the zeros win).
// psum / masked: data tiles are numbered group by group, ceil(rows_g / BLOCK_M) x ceil(N / BLOCK_N) per
// group, so a tile never straddles two groups whatever the alignment, an empty group has no tile, and the
// persistent grid (any size) walks tiles b, b + grid, ... with a cursor that only moves forward (restarted
// once at group 0 for the zero tiles); within a group (and over the m_indices blocks) tiles go in
// cube_gemm.h's panel order (tile_at).
// DG_ZERO_PADDING (psum, ensure_zero_padding): after every group's data tiles come zero tiles over each
// group's padding rows, from its end to the next group's start (to M after the last group), stored from an
// L0C tile that an mmad of zero-filled L0A / L0B produced, so D's padding rows are written here, once;
// otherwise only rows of a group are written. (Zero tiles after all the data tiles: numbered within each
// group, a block could draw only zero tiles while another drew every data tile.)
#pragma once

#ifndef DG_MX
#define DG_MX 0
#endif
#ifndef DG_MASKED
#define DG_MASKED 0
#endif
// DG_ACCUMULATE (masked, FP32 D: fp8_einsum's bhd,bhr->hdr with c = d): the FixPipe stores add to D
// (store-mode atomic add), D = D + A . B^T rounded once.
#ifndef DG_ACCUMULATE
#define DG_ACCUMULATE 0
#endif
#ifndef DG_ZERO_PADDING
#define DG_ZERO_PADDING 0
#endif
#ifndef DG_INDEXED
#define DG_INDEXED 0
#endif
static_assert(!(DG_MASKED && DG_ZERO_PADDING), "zero padding is a psum / m_indices form (zero tiles carry no group)");
#if DG_MX
#ifndef DG_AB_FP4
#define DG_AB_FP4 0
#endif
#ifndef DG_L1_STAGES
#define DG_L1_STAGES (DG_AB_FP4 ? 4 : 3)  // as fp8_mx_gemm.asc: a tile's first K block loads earlier
#endif
#include <deep_gemm/ascend/mx_gemm.h>
#else
#include <deep_gemm/ascend/cube_gemm.h>
#endif
#include <deep_gemm/ascend/kernel_args.h>

#ifndef DG_D_FP32
#define DG_D_FP32 0
#endif
#if DG_D_FP32
using DType = float;
#else
using DType = bfloat16_t;
#endif

namespace dg_ascend {

#if DG_MX
using ABType = MxLoad;
constexpr uint32_t kStageL0A = kMxL0A, kStageL0B = kMxL0B;
#else
using ABType = bfloat16_t;
constexpr uint32_t kStageL0A = kL0A, kStageL0B = kL0B;
#endif

// Group g of the layout and the range of tile numbers it owns, [first, first + tiles): its data tiles
// over its rows [start, end), or (`zeros`, DG_ZERO_PADDING) its zero tiles over its padding [end, pad_end).
struct GroupCursor {
  __gm__ int32_t* layout;
  uint32_t num_groups, alignment, num_n_blocks, m;
  bool zeros = false;
  uint32_t g = 0, start = 0, end = 0, pad_end = 0, first = 0, tiles = 0;

  __aicore__ inline void load() {
    // masked: a row count; psum: an end row. Either is clamped to [start, M] (the host reads neither),
    // so a bad value never moves a tile outside A or D, nor a zero tile onto an earlier group's rows.
    const int32_t value = layout[g];
    end = value < 0 ? 0 : min_u32(uint32_t(value), m);
    if (end < start) end = start;
    if (zeros) {
      pad_end = g + 1 < num_groups ? min_u32(ceil_div(end, alignment) * alignment, m) : m;
      tiles = ceil_div(pad_end > end ? pad_end - end : 0, kBlockM) * num_n_blocks;
    } else {
      tiles = ceil_div(end - start, kBlockM) * num_n_blocks;
    }
  }
  // Group 0 again, counting `zero_tiles` ones.
  __aicore__ inline void restart(bool zero_tiles) {
    zeros = zero_tiles;
    g = start = first = 0;
    load();
  }
  // Moves to the group owning tile t; false once t is past the last group's tiles (first + tiles is
  // then the count of them all).
  __aicore__ inline bool seek(uint32_t t) {
    while (t >= first + tiles) {
      if (g + 1 >= num_groups) return false;
      ++g;
      first += tiles;
      start = DG_MASKED ? 0 : min_u32(ceil_div(end, alignment) * alignment, m);
      load();
    }
    return true;
  }
};

// A rows x cols tile of zeros in L0C stage st.s_l0c (one BF16 mmad over a K of 16 zero-filled
// elements in L0 stage st.s_l0, laid out as the operand kernel's stages are); returns as tile_compute
// does.
__aicore__ inline __cc__ float* zero_tile(uint32_t rows, uint32_t cols, Stages& st) {
  const uint32_t m16 = ceil_div(rows, 16) * 16, n16 = ceil_div(cols, 16) * 16;
  __cc__ float* acc = st.l0c + st.s_l0c * (kL0C / 4);
  __ca__ bfloat16_t* a0 = (__ca__ bfloat16_t*)((__ca__ uint8_t*)st.l0a + st.s_l0 * kStageL0A);
  __cb__ bfloat16_t* b0 = (__cb__ bfloat16_t*)((__cb__ uint8_t*)st.l0b + st.s_l0 * kStageL0B);
  asc_sync_wait(PIPE_FIX, PIPE_M, st.s_l0c);
  asc_sync_wait(PIPE_M, PIPE_MTE1, st.s_l0);
  asc_fill_value_config fill_a, fill_b;
  fill_a.repeat = fill_b.repeat = 1;
  fill_a.blk_num = m16 / 16;  // one 16 x 16 fractal (512 B) per 16 rows
  fill_b.blk_num = n16 / 16;
  fill_a.dst_gap = fill_b.dst_gap = 0;
  asc_fill_l0a(a0, uint32_t(0), fill_a);
  asc_fill_l0b(b0, uint32_t(0), fill_b);
  asc_sync_notify(PIPE_MTE1, PIPE_M, st.s_l0);
  asc_sync_wait(PIPE_MTE1, PIPE_M, st.s_l0);
  asc_mmad(acc, a0, b0, static_cast<uint16_t>(m16), static_cast<uint16_t>(kC0), static_cast<uint16_t>(n16), 0, true,
           false, true);
  asc_sync_notify(PIPE_M, PIPE_MTE1, st.s_l0);
  st.s_l0 ^= 1;
  asc_sync_notify(PIPE_M, PIPE_FIX, st.s_l0c);
  asc_sync_wait(PIPE_M, PIPE_FIX, st.s_l0c);
  return acc;
}

// Stores zeros over rows [m0, m0 + rows) x cols at dst (row m0 of D, column n0).
__aicore__ inline void store_zero_rows(__gm__ DType* dst, uint32_t rows, uint32_t cols, int64_t ldd, Stages& st) {
  __cc__ float* acc = zero_tile(rows, cols, st);
  store_tile_gm(dst, acc, rows, cols, ldd);
  tile_release(st);
}

// The operands of one launch, for group g's tile.
struct GroupOperands {
  __gm__ ABType* a;
  __gm__ ABType* b;
  __gm__ uint16_t* sfa;
  __gm__ uint16_t* sfb;
  int64_t a_group_stride, b_group_stride, ld_sfa, ld_sfb, sfa_group_stride, sfb_group_stride;

  template <int kVecOperand = 0>
  __aicore__ inline __cc__ float* tile(const Problem& p, int64_t g, uint32_t m0, uint32_t n0, uint32_t rows,
                                       uint32_t cols, Stages& st) const {
#if DG_MX
    return mx_tile_compute<kVecOperand>(p, a + g * a_group_stride, b + g * b_group_stride,
                                        sfa + g * sfa_group_stride, sfb + g * sfb_group_stride, ld_sfa, ld_sfb, 0, 0,
                                        m0, n0, rows, cols, st);
#else
    static_assert(kVecOperand == 0, "only the MX tiles take an operand from the vector cores");
    return tile_compute(p, a + g * a_group_stride, b + g * b_group_stride, m0, n0, rows, cols, st);
#endif
  }
};

// One tile of a block's walk: rows [m0, m0 + rows) x columns [n0, n0 + cols) of group g's output, or
// (zero, DG_ZERO_PADDING) rows to write as zeros.
struct GroupTile {
  bool zero;
  int64_t g;
  uint32_t m0, n0, rows, cols;
};

// The tiles one block of the persistent grid computes, in order: b, b + grid, ... over the psum / masked
// groups' data tiles, then (DG_ZERO_PADDING) over every group's zero tiles, so the grid shares out the
// data tiles evenly whatever the padding; or over the m_indices blocks. The cube and, in the fused FP4
// kernel, the block's vector cores walk the same sequence.
struct TileWalk {
  Problem p;
  uint32_t grid, t;
  uint32_t base = 0;   // psum: the data tiles' count once the walk is among the zero tiles
  GroupCursor cur;
  // m_indices: M tiles a block of `alignment` rows holds, M tiles, tiles
  uint32_t per_block = 0, m_tiles = 0, tiles = 0;

  __aicore__ inline TileWalk(const Problem& problem, __gm__ int32_t* layout, uint32_t num_groups, uint32_t alignment)
      : p(problem), grid(uint32_t(asc_get_block_num())), t(uint32_t(asc_get_block_idx())),
        cur{layout, num_groups, alignment, problem.num_n_blocks, problem.m} {
    if constexpr (DG_INDEXED) {
      per_block = ceil_div(alignment, kBlockM);
      m_tiles = ceil_div(p.m, alignment) * per_block;
      tiles = m_tiles * p.num_n_blocks;
    } else if (num_groups > 0) {
      cur.restart(false);
    }
  }

  __aicore__ inline bool next(GroupTile& out) {
#if DG_INDEXED
    // m_indices: an M tile lies in one block of `alignment` rows and takes that block's group.
    for (; t < tiles; t += grid) {
      const TileAt at = tile_at(t, m_tiles, p.num_n_blocks);
      const uint32_t mt = at.m_blk, n0 = at.n_blk * kBlockN;
      const uint32_t block0 = mt / per_block * cur.alignment, m0 = block0 + mt % per_block * kBlockM;
      if (m0 >= p.m) continue;  // past M in the last, partial block
      const uint32_t rows = min_u32(min_u32(kBlockM, block0 + cur.alignment - m0), p.m - m0);
      const uint32_t cols = min_u32(p.n - n0, kBlockN);
      const int32_t g = cur.layout[block0];
      const bool skipped = g < 0 || uint32_t(g) >= cur.num_groups;
      if (skipped && !DG_ZERO_PADDING) continue;
      out = GroupTile{skipped, skipped ? 0 : int64_t(g), m0, n0, rows, cols};
      t += grid;
      return true;
    }
    return false;
#else
    if (cur.num_groups == 0) return false;
    while (!cur.seek(t - base)) {
      if (!DG_ZERO_PADDING || cur.zeros) return false;
      base += cur.first + cur.tiles;  // every group's data tiles: the zero tiles come next
      cur.restart(true);
    }
    const uint32_t local = t - base - cur.first;
    t += grid;
    if (cur.zeros) {
      const uint32_t m0 = cur.end + local / p.num_n_blocks * kBlockM, n0 = local % p.num_n_blocks * kBlockN;
      out = GroupTile{true, 0, m0, n0, min_u32(cur.pad_end - m0, kBlockM), min_u32(p.n - n0, kBlockN)};
      return true;
    }
    const TileAt at = tile_at(local, ceil_div(cur.end - cur.start, kBlockM), p.num_n_blocks);
    const uint32_t m0 = cur.start + at.m_blk * kBlockM, n0 = at.n_blk * kBlockN;
    out = GroupTile{false, int64_t(cur.g), m0, n0, min_u32(cur.end - m0, kBlockM), min_u32(p.n - n0, kBlockN)};
    return true;
#endif
  }
};

// The cube's part: every tile of the walk into D (group g's rows at g * d_group_stride; zero tiles and, with
// m_indices and DG_ZERO_PADDING, a computed tile's padding rows written as zeros after it). kVecOperand as for
// mx_tile_compute.
template <int kVecOperand = 0>
__aicore__ inline void cube_tiles(TileWalk& walk, const GroupOperands& ops, __gm__ DType* d, int64_t ldd,
                                  int64_t d_group_stride, Stages& st) {
  GroupTile j;
  while (walk.next(j)) {
    __gm__ DType* dst = d + j.g * d_group_stride + int64_t(j.m0) * ldd + j.n0;
    if (j.zero) {
      store_zero_rows(dst, j.rows, j.cols, ldd, st);
      continue;
    }
    __cc__ float* acc = ops.tile<kVecOperand>(walk.p, j.g, j.m0, j.n0, j.rows, j.cols, st);
    store_tile_gm(dst, acc, j.rows, j.cols, ldd);
    tile_release(st);
    if constexpr (DG_INDEXED && DG_ZERO_PADDING) {  // the tile's runs of padding rows
      for (uint32_t r = 0; r < j.rows;) {
        if (walk.cur.layout[j.m0 + r] >= 0) { ++r; continue; }
        uint32_t e = r + 1;
        while (e < j.rows && walk.cur.layout[j.m0 + e] < 0) ++e;
        store_zero_rows(dst + int64_t(r) * ldd, e - r, j.cols, ldd, st);
        r = e;
      }
    }
  }
}

// The block's cube tiles of one launch over `kargs` (kVecOperand as in cube_tiles); the caller initialises and
// drains the flags.
template <int kVecOperand = 0>
__aicore__ inline void grouped_cube(const DgMGroupedGemmArgs& kargs, Stages& st) {
  const Problem p = make_problem(kargs.m, kargs.n, kargs.k, kargs.lda, kargs.ldb);
  const GroupOperands ops{(__gm__ ABType*)kargs.a, (__gm__ ABType*)kargs.b, kargs.sfa, kargs.sfb, kargs.a_group_stride,
                          kargs.b_group_stride, kargs.ld_sfa, kargs.ld_sfb, kargs.sfa_group_stride,
                          kargs.sfb_group_stride};
  TileWalk walk(p, kargs.layout, uint32_t(kargs.num_groups), uint32_t(kargs.alignment));
  cube_tiles<kVecOperand>(walk, ops, (__gm__ DType*)kargs.d, kargs.ldd, kargs.d_group_stride, st);
}

}  // namespace dg_ascend
