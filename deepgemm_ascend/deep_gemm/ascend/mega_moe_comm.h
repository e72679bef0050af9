// deep_gemm/ascend/mega_moe_comm.h — Mega MoE's communication steps on the vector cores (the dispatch and the
// combine of mega_moe_comm.asc, whose header comment describes them), for any set of blocks: a step's Ctx names
// this core's block among `grid` (the comm kernel's launch blocks, or the persistent kernel's vector workers).
#pragma once

#include <c_api/asc_simd.h>
#include <dj_symm/device.h>
#include <deep_gemm/ascend/kernel_args.h>

namespace dg_mega {

constexpr int64_t kRowBytes = 32 * 1024;     // UB staging of one row piece
constexpr int64_t kTokens = 64;              // tokens of top-k ids / weights staged at once
constexpr int32_t kMaxTopk = 32;             // DeepGEMM-Ascend's bound (mega.py checks it)
constexpr int32_t kMaxCounts = 4096;         // counts [units, E_l] in UB (mega_moe.py sizes the units)

// UB map (bytes, each region 32-byte aligned)
constexpr int64_t kIdxAt = 0;                                            // int64 [kTokens * kMaxTopk]
constexpr int64_t kWeightsAt = kIdxAt + kTokens * kMaxTopk * 8;          // float [kTokens * kMaxTopk]
constexpr int64_t kCountsAt = kWeightsAt + kTokens * kMaxTopk * 4;       // int32 [kMaxCounts]
constexpr int64_t kNextAt = kCountsAt + kMaxCounts * 4;                  // int32 [kMaxCounts]: next row per expert
constexpr int64_t kWordAt = kNextAt + kMaxCounts * 4;                    // 32 bytes: one staged word
constexpr int64_t kRowAt = kWordAt + 32;                                 // kRowBytes
constexpr int64_t kAccAt = kRowAt + kRowBytes;                           // float acc of one y row piece
static_assert(kAccAt + kRowBytes * 2 <= 192 * 1024, "the UB map fits");

__aicore__ inline int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }
__aicore__ inline int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// GM (a window or a workspace) -> UB, then visible to the scalar unit.
template <typename T>
__aicore__ inline void load_for_scalar(__ubuf__ T* dst, __gm__ const void* src, int64_t bytes) {
  asc_copy_gm2ub_align((__ubuf__ uint8_t*)dst, (__gm__ uint8_t*)src, uint32_t(bytes));
  asc_sync_notify(PIPE_MTE2, PIPE_S, 0);
  asc_sync_wait(PIPE_MTE2, PIPE_S, 0);
}

// Scalar-written UB -> GM, complete before the scalar unit goes on (it may rewrite the UB or signal).
template <typename T>
__aicore__ inline void store_from_scalar(__gm__ void* dst, __ubuf__ T* src, int64_t bytes) {
  asc_sync_notify(PIPE_S, PIPE_MTE3, 0);
  asc_sync_wait(PIPE_S, PIPE_MTE3, 0);
  asc_copy_ub2gm_align((__gm__ uint8_t*)dst, (__ubuf__ uint8_t*)src, uint32_t(bytes));
  asc_sync_notify(PIPE_MTE3, PIPE_S, 0);
  asc_sync_wait(PIPE_MTE3, PIPE_S, 0);
}

// Rows GM -> UB -> GM (either end may be a window) through two UB row buffers, in pieces: a row's load
// overlaps the previous row's store (buffer b's load waits for its previous store, MTE3 -> MTE2 flag 2 + b;
// its store for its load, MTE2 -> MTE3 flag 2 + b). drain(): every store done as the scalar unit sees it (it
// then signals the peers). The pull's scalar word stores between moves wait for every MTE3 store before
// them, which leaves the pending flags as they are.
struct RowPipe {
  __ubuf__ uint8_t* buf[2];
  int32_t b = 0;
  __aicore__ inline RowPipe(__ubuf__ uint8_t* first, __ubuf__ uint8_t* second) {
    buf[0] = first;
    buf[1] = second;
    asc_sync_notify(PIPE_MTE3, PIPE_MTE2, 2);   // both buffers free
    asc_sync_notify(PIPE_MTE3, PIPE_MTE2, 3);
  }
  __aicore__ inline void move(__gm__ uint8_t* dst, __gm__ uint8_t* src, int64_t bytes) {
    for (int64_t at = 0; at < bytes; at += kRowBytes) {
      const uint32_t n = uint32_t(bytes - at < kRowBytes ? bytes - at : kRowBytes);
      asc_sync_wait(PIPE_MTE3, PIPE_MTE2, 2 + b);
      asc_copy_gm2ub_align(buf[b], src + at, n);
      asc_sync_notify(PIPE_MTE2, PIPE_MTE3, 2 + b);
      asc_sync_wait(PIPE_MTE2, PIPE_MTE3, 2 + b);
      asc_copy_ub2gm_align(dst + at, buf[b], n);
      asc_sync_notify(PIPE_MTE3, PIPE_MTE2, 2 + b);
      b ^= 1;
    }
  }
  __aicore__ inline void drain() {
    asc_sync_wait(PIPE_MTE3, PIPE_MTE2, 2);
    asc_sync_wait(PIPE_MTE3, PIPE_MTE2, 3);
    asc_sync_notify(PIPE_MTE3, PIPE_S, 1);
    asc_sync_wait(PIPE_MTE3, PIPE_S, 1);
  }
};

struct Ctx {
  DgMegaMoeCommArgs a;
  dj_symm::Window w;
  int32_t R, me, e_local, first, units;
  int32_t block, grid;   // this core's place among the step's blocks (a launch's blocks, or mega_moe.asc's workers)
  __ubuf__ uint8_t* ub;  // the core's UB (the entry's (__ubuf__ uint8_t*)0, which the twin maps per core)
};

template <typename T>
__aicore__ inline __ubuf__ T* ub(const Ctx& c, int64_t at) { return (__ubuf__ T*)(c.ub + at); }

// The context of a step run by `block` of `grid` blocks.
__aicore__ inline Ctx make_ctx(const DgMegaMoeCommArgs& a, int32_t block, int32_t grid, __ubuf__ uint8_t* ub_base) {
  Ctx c;
  c.a = a;
  c.w = dj_symm::make_window(a.symm_bases, a.symm_bytes, a.symm_data_offset, a.symm_rank, a.symm_num_ranks,
                             a.symm_timeout_ns);
  c.R = a.symm_num_ranks;
  c.me = a.symm_rank;
  c.e_local = a.num_experts / c.R;
  c.first = c.me * c.e_local;
  c.units = c.R * a.units_per_rank;
  c.block = block;
  c.grid = grid;
  c.ub = ub_base;
  return c;
}

__aicore__ inline __gm__ uint8_t* peer_view(const Ctx& c, int32_t p, int64_t offset) {
  return dj_symm::remote(c.w, p, c.a.symm_data_offset + offset);
}

// Rank p's token count as it published it, clamped to the buffer's rows.
__aicore__ inline int64_t peer_tokens(const Ctx& c, int32_t p) {
  __ubuf__ int64_t* word = ub<int64_t>(c, kWordAt);
  load_for_scalar(word, peer_view(c, p, c.a.off_num_tokens), 8);
  return clamp64(word[0], 0, c.a.max_tokens);
}

// The local expert of id (or -1): ids outside [0, num_experts) are masked, as -1 is.
__aicore__ inline int32_t local_expert(const Ctx& c, int64_t id) {
  if (id < 0 || id >= c.a.num_experts) return -1;
  const int64_t e = id - c.first;
  return e >= 0 && e < c.e_local ? int32_t(e) : -1;
}

// Stages tokens [t0, t0 + n) of rank p's top-k ids (and weights) in UB.
__aicore__ inline void stage_routing(const Ctx& c, int32_t p, int64_t t0, int64_t n, bool weights) {
  const int64_t K = c.a.topk;
  load_for_scalar(ub<int64_t>(c, kIdxAt), peer_view(c, p, c.a.off_topk_idx + t0 * K * 8), n * K * 8);
  if (weights) load_for_scalar(ub<float>(c, kWeightsAt), peer_view(c, p, c.a.off_topk_weights + t0 * K * 4), n * K * 4);
}

// Unit u: tokens [lo, hi) of rank p (the chunks split the rank's clamped token count evenly, in token order).
struct Unit {
  int32_t p;
  int64_t lo, hi;
};

__aicore__ inline Unit unit(const Ctx& c, int32_t u) {
  const int64_t per = c.a.units_per_rank, chunk = u % per;
  const int32_t p = u / int32_t(per);
  const int64_t tokens = peer_tokens(c, p);
  return Unit{p, tokens * chunk / per, tokens * (chunk + 1) / per};
}

// This rank's inputs -- rows [0, num_tokens) of the caller's x, x_sf, top-k ids and weights (the SymmBuffer's
// own device tensors) -- into its window, an equal share of rows a block in multiples of 8 (every start stays
// 32-byte aligned: hidden is a multiple of 128), then a grid barrier on flag 2R: every row is in the window
// before block 0 announces them.
__aicore__ inline void publish(const Ctx& c) {
  const int64_t T = clamp64(c.a.num_tokens, 0, c.a.max_tokens), K = c.a.topk, sf_bytes = c.a.sf_words * 4;
  const int64_t share = align_up((T + c.grid - 1) / c.grid, 8), t0 = share * c.block;
  RowPipe pipe(ub<uint8_t>(c, kRowAt), ub<uint8_t>(c, kAccAt));
  if (t0 < T) {
    const int64_t n = T - t0 < share ? T - t0 : share;
    const int64_t rows = t0 * c.a.row_bytes;
    pipe.move(peer_view(c, c.me, c.a.off_x + rows), c.a.in_x + rows, n * c.a.row_bytes);
    if (sf_bytes) pipe.move(peer_view(c, c.me, c.a.off_x_sf + t0 * sf_bytes), c.a.in_x_sf + t0 * sf_bytes,
                            n * sf_bytes);
    pipe.move(peer_view(c, c.me, c.a.off_topk_idx + t0 * K * 8), c.a.in_topk_idx + t0 * K * 8, n * K * 8);
    pipe.move(peer_view(c, c.me, c.a.off_topk_weights + t0 * K * 4), c.a.in_topk_weights + t0 * K * 4, n * K * 4);
  }
  pipe.drain();
  dj_symm::signal_op(c.w, c.me, 2 * c.R, 1, dj_symm::kSignalAdd);
  dj_symm::signal_wait_until_ge(c.w, 2 * c.R, (2 * c.a.seq - 1) * c.grid);
}

__aicore__ inline void arrive_and_count(const Ctx& c) {
  const int32_t block = c.block, grid = c.grid;
  publish(c);
  if (block == 0) {
    __ubuf__ int64_t* word = ub<int64_t>(c, kWordAt);
    word[0] = c.a.num_tokens;
    store_from_scalar(peer_view(c, c.me, c.a.off_num_tokens), word, 8);
    for (int32_t d = 0; d < c.R; ++d) dj_symm::signal_op(c.w, d, c.me, c.a.seq, dj_symm::kSignalSet);
  }
  for (int32_t p = 0; p < c.R; ++p) dj_symm::signal_wait_until_ge(c.w, p, c.a.seq);
  __ubuf__ int32_t* counts = ub<int32_t>(c, kCountsAt);
  __ubuf__ int64_t* idx = ub<int64_t>(c, kIdxAt);
  for (int32_t u = block; u < c.units; u += grid) {
    for (int32_t e = 0; e < c.e_local; ++e) counts[e] = 0;
    const Unit s = unit(c, u);
    for (int64_t t0 = s.lo; t0 < s.hi; t0 += kTokens) {
      const int64_t n = s.hi - t0 < kTokens ? s.hi - t0 : kTokens;
      stage_routing(c, s.p, t0, n, false);
      for (int64_t i = 0; i < n * c.a.topk; ++i) {
        const int32_t e = local_expert(c, idx[i]);
        if (e >= 0) counts[e] += 1;
      }
    }
    store_from_scalar(c.a.counts + int64_t(u) * c.e_local, counts, int64_t(c.e_local) * 4);
  }
  // every block's counts are in GM before any block places rows (the signal follows its stores)
  dj_symm::signal_op(c.w, c.me, 2 * c.R, 1, dj_symm::kSignalAdd);
  dj_symm::signal_wait_until_ge(c.w, 2 * c.R, 2 * c.a.seq * grid);
}

// counts [units, E_l] into UB; next[e] := the first layout row of unit u's pairs for expert e; returns the psum
// ends through `ends` (UB, clamped to m_cap) when not null.
__aicore__ inline void place(const Ctx& c, int32_t u, __ubuf__ int32_t* next, __ubuf__ int32_t* ends) {
  __ubuf__ int32_t* counts = ub<int32_t>(c, kCountsAt);
  load_for_scalar(counts, c.a.counts, int64_t(c.units) * c.e_local * 4);
  int64_t end = 0;
  for (int32_t e = 0; e < c.e_local; ++e) {
    int64_t start = e == 0 ? 0 : align_up(end, c.a.alignment), before = 0, total = 0;
    for (int32_t q = 0; q < c.units; ++q) {
      const int64_t n = clamp64(counts[q * c.e_local + e], 0, c.a.m_cap);
      if (q < u) before += n;
      total += n;
    }
    end = start + total;
    next[e] = int32_t(clamp64(start + before, 0, c.a.m_cap));
    if (ends) ends[e] = int32_t(clamp64(end, 0, c.a.m_cap));
  }
}

// The waves of a call: enough to cover the layout's rows up to the last expert's end (at least one). Read
// from GM by any core once the dispatch's first pull has written the ends, after a meeting (its asc_dcci: the
// scalar read must not hit a stale DCache line).
__aicore__ inline int32_t waves(const DgMegaMoeCommArgs& a) {
  const int64_t last = clamp64(a.ends[a.num_experts / a.symm_num_ranks - 1], 0, a.m_cap);
  const int64_t n = (last + a.ring - 1) / a.ring;
  return int32_t(n > 1 ? n : 1);
}

// Wave w's end rows, relative to its first layout row w * ring and clamped to the wave (the psum layout of the
// rows it holds: an expert before it ends at 0, one after it at ring, one that straddles a border is cut there).
__aicore__ inline __gm__ int32_t* wave_ends(const DgMegaMoeCommArgs& a, int32_t w) {
  return a.wave_ends + int64_t(w) * (a.num_experts / a.symm_num_ranks);
}

// Pulls the pairs of wave w (layout rows [w * ring, (w + 1) * ring)) into rows [0, ring) of a; the call's first
// pull (wave 0's) also writes the psum end rows and the stats. Block 0 writes the wave's end rows.
__aicore__ inline void pull(const Ctx& c, int32_t wave) {
  const int32_t block = c.block, grid = c.grid;
  const int64_t v0 = int64_t(wave) * c.a.ring;
  __ubuf__ int32_t* next = ub<int32_t>(c, kNextAt);
  __ubuf__ int64_t* idx = ub<int64_t>(c, kIdxAt);
  __ubuf__ float* wts = ub<float>(c, kWeightsAt);
  __ubuf__ int32_t* word = ub<int32_t>(c, kWordAt);
  if (block == 0) {
    place(c, 0, next, next);
    if (wave == 0) store_from_scalar(c.a.ends, next, int64_t(c.e_local) * 4);
    for (int32_t e = 0; e < c.e_local; ++e) next[e] = int32_t(clamp64(next[e] - v0, 0, c.a.ring));
    store_from_scalar(wave_ends(c.a, wave), next, int64_t(c.e_local) * 4);
  }
  if (block == 0 && wave == 0) {  // the stats
    if (c.a.has_stats) {
      __ubuf__ int32_t* stats = ub<int32_t>(c, kCountsAt);
      __ubuf__ int32_t* counts = ub<int32_t>(c, kIdxAt);   // the counts again, beside the stats
      load_for_scalar(counts, c.a.counts, int64_t(c.units) * c.e_local * 4);
      load_for_scalar(stats, c.a.stats, int64_t(c.e_local) * 4);
      for (int32_t e = 0; e < c.e_local; ++e)
        for (int32_t q = 0; q < c.units; ++q) stats[e] += counts[q * c.e_local + e];
      store_from_scalar(c.a.stats, stats, int64_t(c.e_local) * 4);
    }
  }
  const int64_t K = c.a.topk, sf_bytes = c.a.sf_words * 4;
  RowPipe pipe(ub<uint8_t>(c, kRowAt), ub<uint8_t>(c, kAccAt));
  __ubuf__ int32_t* counts = ub<int32_t>(c, kCountsAt);
  for (int32_t u = block; u < c.units; u += grid) {
    place(c, u, next, nullptr);
    bool in_wave = false;   // a unit none of whose pairs lands in this wave is not staged again
    for (int32_t e = 0; e < c.e_local && !in_wave; ++e) {
      const int64_t n = clamp64(counts[u * c.e_local + e], 0, c.a.m_cap);
      in_wave = n > 0 && next[e] < v0 + c.a.ring && next[e] + n > v0;
    }
    if (!in_wave) continue;
    const Unit s = unit(c, u);
    const int32_t p = s.p;
    for (int64_t t0 = s.lo; t0 < s.hi; t0 += kTokens) {
      const int64_t n = s.hi - t0 < kTokens ? s.hi - t0 : kTokens;
      stage_routing(c, p, t0, n, true);
      for (int64_t i = 0; i < n * K; ++i) {
        const int32_t e = local_expert(c, idx[i]);
        if (e < 0) continue;
        const int64_t v = next[e];
        next[e] = int32_t(v + 1);
        // another wave's row; past m_cap cannot happen with the host's m_cap (no write past a regardless)
        if (v < v0 || v >= v0 + c.a.ring || v >= c.a.m_cap) continue;
        const int64_t r = v - v0;
        const int64_t t = t0 + i / K, k = i % K;
        pipe.move(c.a.a + r * c.a.row_bytes, peer_view(c, p, c.a.off_x + t * c.a.row_bytes), c.a.row_bytes);
        if (sf_bytes) pipe.move((__gm__ uint8_t*)(c.a.a_sf + r * c.a.sf_words),
                               peer_view(c, p, c.a.off_x_sf + t * sf_bytes), sf_bytes);
        ((__ubuf__ float*)word)[0] = wts[i];
        store_from_scalar(c.a.weights + r, (__ubuf__ float*)word, 4);
        word[0] = int32_t((int64_t(p) * c.a.max_tokens + t) * K + k);
        store_from_scalar(c.a.src + r, word, 4);
      }
    }
  }
  pipe.drain();
}

// The dispatch of a call that fits one wave (mega_moe_comm.asc); mega_moe.asc pulls each wave in turn.
__aicore__ inline void dispatch(const Ctx& c) {
  arrive_and_count(c);
  pull(c, 0);
}

constexpr int64_t kSrcWords = kTokens * kMaxTopk * 2;   // sources staged at once (the top-k ids' UB bytes)

// Wave w's rows to their sources' combine slots: each block sends an equal contiguous share of the wave's valid
// rows (expert by expert, in row order), their sources staged kSrcWords at a time (the scalar unit has read a
// batch before the next one's load, which queues behind the row loads on MTE2).
__aicore__ inline void send(const Ctx& c, int32_t wave) {
  const int32_t block = c.block, grid = c.grid;
  __ubuf__ int32_t* ends = ub<int32_t>(c, kNextAt);
  __ubuf__ int32_t* src = ub<int32_t>(c, kIdxAt);
  load_for_scalar(ends, wave_ends(c.a, wave), int64_t(c.e_local) * 4);
  const int64_t K = c.a.topk, slots = int64_t(c.R) * c.a.max_tokens * K, out_bytes = c.a.hidden * 2;
  int64_t valid = 0, start = 0;
  for (int32_t e = 0; e < c.e_local; ++e) {
    const int64_t end = clamp64(ends[e], start, c.a.ring);
    valid += end - start;
    start = align_up(end, c.a.alignment);
  }
  const int64_t j0 = valid * block / grid, j1 = valid * (block + 1) / grid;
  RowPipe pipe(ub<uint8_t>(c, kRowAt), ub<uint8_t>(c, kAccAt));
  int64_t j = 0;
  start = 0;
  for (int32_t e = 0; e < c.e_local && j < j1; ++e) {
    const int64_t end = clamp64(ends[e], start, c.a.ring);
    // rows [start, end) are valid rows [j, j + end - start); this block's part of them:
    const int64_t lo = start + (j0 > j ? j0 - j : 0), hi = end < start + (j1 - j) ? end : start + (j1 - j);
    for (int64_t r0 = lo; r0 < hi; r0 += kSrcWords) {
      const int64_t n = hi - r0 < kSrcWords ? hi - r0 : kSrcWords;
      load_for_scalar(src, c.a.src + r0, n * 4);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t s = clamp64(src[i], 0, slots - 1);
        const int32_t p = int32_t(s / (c.a.max_tokens * K));
        const int64_t t = s / K % c.a.max_tokens, k = s % K;
        pipe.move(peer_view(c, p, c.a.off_combine + (k * c.a.max_tokens + t) * out_bytes),
                  c.a.l2_out + (r0 + i) * out_bytes, out_bytes);
      }
    }
    j += end - start;
    start = align_up(end, c.a.alignment);
  }
  pipe.drain();
}

// This block has sent every wave's rows: it tells every rank, then waits until every rank's blocks have.
__aicore__ inline void sent(const Ctx& c) {
  for (int32_t d = 0; d < c.R; ++d) dj_symm::signal_op(c.w, d, c.R + c.me, 1, dj_symm::kSignalAdd);
  for (int32_t p = 0; p < c.R; ++p) dj_symm::signal_wait_until_ge(c.w, c.R + p, c.a.seq * c.grid);
}

// acc (FP32; per 128 columns the 64 even ones, then the 64 odd ones) := (first ? 0 : acc) + row (BF16), n
// columns (a multiple of 128).
__simd_vf__ inline void accumulate_vf(__ubuf__ float* acc, __ubuf__ bfloat16_t* row, uint32_t n, int32_t first) {
  const vector_bool all = asc_create_mask_b16(PAT_ALL);
  for (uint32_t i = 0; i < n; i += 128) {
    vector_bfloat16_t v;
    vector_float even, odd, acc_even, acc_odd;
    asc_loadalign(v, row + i);
    asc_bfloat162float(even, v, all);
    asc_bfloat162float_v2(odd, v, all);
    if (first) {
      asc_duplicate_scalar(acc_even, 0.0f, all);
      asc_duplicate_scalar(acc_odd, 0.0f, all);
    } else {
      asc_loadalign(acc_even, acc + i);
      asc_loadalign(acc_odd, acc + i + 64);
    }
    asc_add(acc_even, acc_even, even, all);
    asc_add(acc_odd, acc_odd, odd, all);
    asc_storealign(acc + i, acc_even, all);
    asc_storealign(acc + i + 64, acc_odd, all);
  }
}

__simd_vf__ inline void zero_vf(__ubuf__ float* acc, uint32_t n) {
  const vector_bool all = asc_create_mask_b32(PAT_ALL);
  vector_float zero;
  asc_duplicate_scalar(zero, 0.0f, all);
  for (uint32_t i = 0; i < n; i += 64) asc_storealign(acc + i, zero, all);
}

// row (BF16, natural column order) := round-to-nearest-even of acc (layout of accumulate_vf).
__simd_vf__ inline void round_vf(__ubuf__ bfloat16_t* row, __ubuf__ float* acc, uint32_t n) {
  const vector_bool all = asc_create_mask_b16(PAT_ALL);
  for (uint32_t i = 0; i < n; i += 128) {
    vector_float acc_even, acc_odd;
    vector_bfloat16_t even, odd;
    vector_uint16_t both;
    asc_loadalign(acc_even, acc + i);
    asc_loadalign(acc_odd, acc + i + 64);
    asc_float2bfloat16_rn(even, acc_even, all);    // into the even BF16 elements, the odd ones 0 ...
    asc_float2bfloat16_rn_v2(odd, acc_odd, all);   // ... and the other way round: one OR interleaves them
    asc_or(both, (vector_uint16_t&)even, (vector_uint16_t&)odd, all);
    asc_storealign((__ubuf__ uint16_t*)row + i, both, all);
  }
}

__aicore__ inline void reduce(const Ctx& c) {
  const int32_t block = c.block, grid = c.grid;
  const int64_t K = c.a.topk, piece = kRowBytes / 2;   // columns per pass: one row buffer of BF16
  __ubuf__ int64_t* idx = ub<int64_t>(c, kIdxAt);
  __ubuf__ bfloat16_t* row = ub<bfloat16_t>(c, kRowAt);
  __ubuf__ float* acc = ub<float>(c, kAccAt);
  for (int64_t t = block; t < c.a.num_tokens; t += grid) {
    load_for_scalar(idx, peer_view(c, c.me, c.a.off_topk_idx + t * K * 8), K * 8);
    for (int64_t h0 = 0; h0 < c.a.hidden; h0 += piece) {
      const int64_t n = c.a.hidden - h0 < piece ? c.a.hidden - h0 : piece;
      int32_t first = 1;
      for (int64_t k = 0; k < K; ++k) {
        if (idx[k] < 0 || idx[k] >= c.a.num_experts) continue;
        asc_copy_gm2ub_align((__ubuf__ uint8_t*)row,
                             peer_view(c, c.me, c.a.off_combine + ((k * c.a.max_tokens + t) * c.a.hidden + h0) * 2),
                             uint32_t(n * 2));
        asc_sync_notify(PIPE_MTE2, PIPE_V, 0);
        asc_sync_wait(PIPE_MTE2, PIPE_V, 0);
        accumulate_vf(acc, row, uint32_t(n), first);
        asc_sync_notify(PIPE_V, PIPE_MTE2, 0);
        asc_sync_wait(PIPE_V, PIPE_MTE2, 0);
        first = 0;
      }
      if (first) zero_vf(acc, uint32_t(n));   // no valid slot: y[t] = 0
      round_vf(row, acc, uint32_t(n));
      asc_sync_notify(PIPE_V, PIPE_MTE3, 0);
      asc_sync_wait(PIPE_V, PIPE_MTE3, 0);
      asc_copy_ub2gm_align(c.a.y + (t * c.a.hidden + h0) * 2, (__ubuf__ uint8_t*)row, uint32_t(n * 2));
      asc_sync_notify(PIPE_MTE3, PIPE_MTE2, 0);   // the row buffer is free for the next loads ...
      asc_sync_wait(PIPE_MTE3, PIPE_MTE2, 0);
      asc_sync_notify(PIPE_MTE3, PIPE_V, 0);      // ... and for the next rounding
      asc_sync_wait(PIPE_MTE3, PIPE_V, 0);
    }
  }
}

}  // namespace dg_mega
