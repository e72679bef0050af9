// c_api/sync.h — AscendC synchronisation on the twin (docs/zh/api/SIMD-API/C-API/sync/*.md).
//
// Within a core (one thread, program order), pipe flags and mutexes order nothing the twin runs, so they
// are checked for discipline, and for the order they give the chip's concurrent pipes:
//   asc_sync_notify(src, dst, id) / asc_sync_wait(src, dst, id): the flag is one bit per (src, dst, id),
//     ids EVENT_ID0-7 (asc_sync_notify.md: 8 per pipe pair; a second notify before the wait that clears
//     the flag is undefined behaviour, as CANN's set_flag rule calls it illegal), so a notify of a flag
//     still set is reported at once; a wait takes the one earlier notify, a wait with none pending can
//     never be satisfied and is reported at once; notifies still pending at kernel end are reported. The
//     pipes' order on the chip is tracked beside the program order (PipeOrder): a notify that nothing orders
//     after the wait that took the flag's previous notify may set the flag again before that wait, and is
//     reported whatever the timing (a load and a store flag a row, with nothing holding the loads back).
//   asc_lock(pipe, id[, mode]) / asc_unlock(pipe, id[, mode]): strictly paired, same id and mode,
//     never nested for one id (asc_lock.md "约束说明"); a lock still held at kernel end is reported.
// Across the cores of a block the flags are real counters that block:
//   asc_sync_intra_arrive(pipe, id) / asc_sync_intra_wait(pipe, id): 4-bit counters, id mapping of
//     asc_sync_intra_arrive.md (AIV0 id i -> AIC i, AIV1 id i -> AIC 16+i, AIC i<16 -> AIV0 i,
//     AIC 16+i -> AIV1 i). A wait blocks until its counter is positive, at most DJ_TWIN_WAIT_TIMEOUT
//     seconds (default 10), then the launch fails naming the flag, pipe and core.
#pragma once

#include <chrono>

#include "dj_twin/runtime.h"

enum ascMutexExecuteMode { ASC_LOCK_BLOCK = 0, ASC_LOCK_NON_BLOCK = 1 };

namespace dj_twin {

inline void check_pipe(int pipe, const char* op) {
  if (pipe < 0 || pipe >= kNumPipes) fail("%s: pipe %d is not a pipe_t", op, pipe);
}

// The bit of flag (src, dst, id) on this core, after checking it names one: two pipes, neither PIPE_ALL
// (asc_sync_notify.md / asc_sync_wait.md: it raises an exception), and an id in EVENT_ID0-7.
inline uint8_t& flag_bit(int src, int dst, int id, const char* op) {
  for (int pipe : {src, dst}) {
    check_pipe(pipe, op);
    if (pipe == PIPE_ALL) fail("%s: PIPE_ALL is not a pipe a flag can name (asc_sync_notify.md)", op);
  }
  if (id < 0 || id >= kNumEvents)
    fail("%s(%s, %s, %d): event id outside [0, %d)", op, pipe_name(src), pipe_name(dst), id, kNumEvents);
  return core().flags[src][dst][id];
}

inline void sync_notify(int src, int dst, int id) {
  poll();
  uint8_t& pending = flag_bit(src, dst, id, "asc_sync_notify");
  if (pending != 0)
    fail("asc_sync_notify(%s, %s, event %d): the flag is still set by an earlier notify that no asc_sync_wait "
         "has taken; a flag is one bit, so a second notify before the wait is undefined (asc_sync_notify.md)",
         pipe_name(src), pipe_name(dst), id);
  pending = 1;
  if (src != dst) {
    PipeOrder& o = pipe_order();
    const uint32_t* clock = issue_clock(o, src);
    const uint32_t taken = o.taken_at[src][dst][id];
    if (taken != 0 && clock[dst] < taken)
      fail("asc_sync_notify(%s, %s, event %d): nothing orders this notify after the asc_sync_wait that took the "
           "flag's previous notify, so %s can run ahead of %s and set the flag while it is still set, which is "
           "undefined (asc_sync_notify.md); order it after that wait, e.g. by a flag from %s back to %s",
           pipe_name(src), pipe_name(dst), id, pipe_name(src), pipe_name(dst), pipe_name(dst), pipe_name(src));
    std::memcpy(o.at_notify[src][dst][id], clock, sizeof o.at_notify[src][dst][id]);
  }
  if (Timeline* t = core().timeline) timeline_push(*t, Ev::Set, src, src, dst, uint32_t(id));
}

inline void sync_wait(int src, int dst, int id) {
  poll();
  uint8_t& pending = flag_bit(src, dst, id, "asc_sync_wait");
  if (pending == 0)
    fail("asc_sync_wait(%s, %s, event %d): no asc_sync_notify of this flag precedes it on this core, so the "
         "wait can never be satisfied", pipe_name(src), pipe_name(dst), id);
  pending = 0;
  if (src != dst) {
    PipeOrder& o = pipe_order();
    uint32_t* clock = issue_clock(o, dst);
    join_clock(clock, o.at_notify[src][dst][id]);
    o.taken_at[src][dst][id] = ++clock[dst];
  }
  if (Timeline* t = core().timeline) timeline_push(*t, Ev::Wait, dst, src, dst, uint32_t(id));
}

inline void lock(int pipe, int id, int mode) {
  poll();
  check_pipe(pipe, "asc_lock");
  Core& c = core();
  if (id < 0 || id >= kNumMutexes) fail("asc_lock(%s, %d): mutex id outside [0, %d)", pipe_name(pipe), id, kNumMutexes);
  if (c.mutex_mode[id] >= 0)
    fail("asc_lock(%s, %d): mutex %d is already locked (by %s) and not unlocked: nested lock", pipe_name(pipe), id,
         id, pipe_name(c.mutex_pipe[id]));
  c.mutex_mode[id] = int8_t(mode);
  c.mutex_pipe[id] = uint8_t(pipe);
  if (pipe != PIPE_ALL) {   // the lock waits for the previous holder's unlock
    PipeOrder& o = pipe_order();
    join_clock(issue_clock(o, pipe), o.at_unlock[id]);
  }
}

inline void unlock(int pipe, int id, int mode) {
  poll();
  check_pipe(pipe, "asc_unlock");
  Core& c = core();
  if (id < 0 || id >= kNumMutexes) fail("asc_unlock(%s, %d): mutex id outside [0, %d)", pipe_name(pipe), id, kNumMutexes);
  if (c.mutex_mode[id] < 0) fail("asc_unlock(%s, %d): mutex %d is not locked", pipe_name(pipe), id, id);
  if (c.mutex_mode[id] != mode)
    fail("asc_unlock(%s, %d, mode %d): locked with mode %d; a pair must use one mode", pipe_name(pipe), id, mode,
         c.mutex_mode[id]);
  c.mutex_mode[id] = -1;
  if (pipe != PIPE_ALL) {
    PipeOrder& o = pipe_order();
    std::memcpy(o.at_unlock[id], issue_clock(o, pipe), sizeof o.at_unlock[id]);
  }
}

// The counter an arrive from this core with `id` increments, per asc_sync_intra_arrive.md.
inline uint8_t* intra_target(int id, Core** target) {
  Core& c = core();
  Block& b = *c.block;
  if (c.kind == CoreKind::AIV) {
    if (id < 0 || id >= 16) fail("asc_sync_intra_arrive: a vector core's sync id must be in [0, 16), got %d", id);
    *target = b.aic;
    if (!b.aic) fail("asc_sync_intra_arrive(%d): this block has no cube core (not a __mix__ kernel)", id);
    return &b.aic->intra[c.sub_block * 16 + id];
  }
  if (id < 0 || id >= 32) fail("asc_sync_intra_arrive: a cube core's sync id must be in [0, 32), got %d", id);
  Core* v = b.aiv[id / 16];
  if (!v) fail("asc_sync_intra_arrive(%d): this block has no vector core %d", id, id / 16);
  *target = v;
  return &v->intra[id % 16];
}

inline void intra_arrive(int pipe, int id) {
  poll();
  check_pipe(pipe, "asc_sync_intra_arrive");
  Core& c = core();
  Core* target = nullptr;
  uint8_t* counter = intra_target(id, &target);
  std::unique_lock<std::mutex> guard(c.block->mu);
  if (*counter >= kIntraMax) {
    guard.unlock();
    fail("asc_sync_intra_arrive(%s, %d): the 4-bit counter of %s is already %d and would overflow", pipe_name(pipe),
         id, target->core_name(), kIntraMax);
  }
  *counter += 1;
  guard.unlock();
  c.block->cv.notify_all();
  if (c.timeline)
    timeline_push(*c.timeline, Ev::IntraArrive, pipe, target->kind == CoreKind::AIC ? 0 : 1 + target->sub_block, 0,
                  uint32_t(counter - target->intra));
}

inline void intra_wait(int pipe, int id) {
  poll();
  check_pipe(pipe, "asc_sync_intra_wait");
  Core& c = core();
  int limit = c.kind == CoreKind::AIC ? 32 : 16;
  if (id < 0 || id >= limit) fail("asc_sync_intra_wait: sync id must be in [0, %d) on %s, got %d", limit,
                                  c.core_name(), id);
  auto start = std::chrono::steady_clock::now();
  auto deadline = start + std::chrono::duration<double>(c.launch->wait_timeout_s);
  std::unique_lock<std::mutex> guard(c.block->mu);
  while (c.intra[id] == 0) {
    if (c.launch->failed.load()) {
      guard.unlock();
      poll();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      guard.unlock();
      fail("asc_sync_intra_wait(%s, %d): no asc_sync_intra_arrive reached this flag within %.1f s "
           "(DJ_TWIN_WAIT_TIMEOUT)", pipe_name(pipe), id, c.launch->wait_timeout_s);
    }
    c.block->cv.wait_for(guard, std::chrono::milliseconds(20));
  }
  c.intra[id] -= 1;
  guard.unlock();
  order_after_all_pipes(pipe);
  if (c.timeline) timeline_push(*c.timeline, Ev::IntraWait, pipe, 0, 0, uint32_t(id));
  c.counters.wait_ns += uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

// Called when a core's kernel function returns: pending flags (unless DJ_TWIN_ALLOW_UNPAIRED_FLAGS) and held
// locks are errors.
inline void check_sync_at_exit() {
  Core& c = core();
  for (int s = 0; s < kNumPipes && !c.launch->allow_unpaired_flags; ++s)
    for (int d = 0; d < kNumPipes; ++d)
      for (int e = 0; e < kNumEvents; ++e)
        if (c.flags[s][d][e])
          fail("kernel end: asc_sync_notify(%s, %s, event %d) was set and never waited on", pipe_name(s),
               pipe_name(d), e);
  for (int m = 0; m < kNumMutexes; ++m)
    if (c.mutex_mode[m] >= 0) fail("kernel end: asc_lock(%s, %d) was never unlocked", pipe_name(c.mutex_pipe[m]), m);
}

}  // namespace dj_twin

// Functions, not macros: real overloads win over c_api/unimplemented.h's variadic fallbacks.
inline void asc_sync_notify(int pipe, int tpipe, int id) { ::dj_twin::sync_notify(pipe, tpipe, id); }
inline void asc_sync_wait(int pipe, int tpipe, int id) { ::dj_twin::sync_wait(pipe, tpipe, id); }
inline void asc_lock(int pipe, int mutex_id, int mode = ASC_LOCK_BLOCK) { ::dj_twin::lock(pipe, mutex_id, mode); }
inline void asc_unlock(int pipe, int mutex_id, int mode = ASC_LOCK_BLOCK) { ::dj_twin::unlock(pipe, mutex_id, mode); }
inline void asc_sync_intra_arrive(int pipe, uint64_t sync_id) { ::dj_twin::intra_arrive(pipe, int(sync_id)); }
inline void asc_sync_intra_wait(int pipe, uint64_t sync_id) { ::dj_twin::intra_wait(pipe, int(sync_id)); }

// Ordering within one pipe: given by program order; across all pipes (asc_sync): the scalar's PipeOrder clock.
namespace dj_twin {
inline void barrier(int pipe) {
  poll();
  if (pipe == PIPE_ALL) order_after_all_pipes(PIPE_S);   // the scalar unit waits for every pipe
  if (Timeline* t = core().timeline) timeline_push(*t, Ev::Barrier, pipe);
}
}  // namespace dj_twin
inline void asc_sync_pipe(pipe_t pipe) { ::dj_twin::barrier(pipe); }
inline void asc_sync() { ::dj_twin::barrier(PIPE_ALL); }
// As asc-devkit's 3510 implementation (instr_impl/npu_arch_3510/sync_impl/asc_sync_pipe_impl.h) defines them:
// asc_sync_vec is the all-pipe barrier; asc_sync_mte2 / asc_sync_mte3 order the mover's earlier work before
// the other mover's and the vector pipe's later work through flags `id` of those pairs, then its own pipe.
inline void asc_sync_vec() { ::dj_twin::barrier(PIPE_ALL); }
namespace dj_twin {
inline void mover_sync(int mover, int other, int id) {
  sync_notify(mover, other, id);
  sync_notify(mover, PIPE_V, id);
  sync_wait(mover, other, id);
  sync_wait(mover, PIPE_V, id);
  barrier(mover);
}
}  // namespace dj_twin
inline void asc_sync_mte2(int id) { ::dj_twin::mover_sync(PIPE_MTE2, PIPE_MTE3, id); }
inline void asc_sync_mte3(int id) { ::dj_twin::mover_sync(PIPE_MTE3, PIPE_MTE2, id); }

// ---- cross-block (all-core) flags ----------------------------------------------------------------------
// asc_sync_inter_arrive(pipe, flag) / asc_sync_inter_wait(pipe, flag) are CrossCoreSetFlag / WaitFlag of
// mode 0 (TileLang 0.1.15 tilelang/ascend/language/sync.py: "CrossCoreSetFlag<0, pipe>"), whose meaning
// asc-devkit docs/zh/api/SIMD-API/基础API/同步控制/核间同步/关键特性说明.md gives: once every core of one
// kind (all AIC, or all AIV) of the launch has arrived on a flag, each of those cores' counter of that flag
// goes up by one; a wait blocks until its own counter is positive and takes one off. Flag ids 0..15, counters
// 0..15 (asc_sync_inter_wait.md). So round r of a flag completes when every core of the kind has arrived r
// times: a core's counter is min(arrives) - its waits. Every block must run at once for a round to
// complete: a launch with more blocks than the chip's cores of that kind never completes one (on the chip
// as well), and is reported at the first arrive. A wait whose round can no longer complete (a core of the
// kind returned without arriving) fails at once, naming the blocks; otherwise after DJ_TWIN_WAIT_TIMEOUT.
namespace dj_twin {

inline int inter_kind(const Core& c) { return c.kind == CoreKind::AIC ? 0 : 1; }
inline size_t inter_participants(const Launch& l, int kind) {
  if (l.kind == KernelKind::Mix) return size_t(l.num_blocks) * (kind == 0 ? 1 : 2);
  const bool present = (l.kind == KernelKind::Cube) == (kind == 0);
  return present ? size_t(l.num_blocks) : 0;
}
inline size_t inter_index(const Core& c) {
  return c.kind == CoreKind::AIV && c.launch->kind == KernelKind::Mix ? size_t(c.block_idx) * 2 + size_t(c.sub_block)
                                                                      : size_t(c.block_idx);
}
inline void inter_size(Launch& l) {  // under l.inter.mu
  if (l.inter.sized) return;
  for (int k = 0; k < 2; ++k) {
    const size_t n = inter_participants(l, k);
    for (int f = 0; f < 16; ++f) {
      l.inter.arrives[k][f].assign(n, 0);
      l.inter.waits[k][f].assign(n, 0);
    }
    l.inter.exited[k].assign(n, 0);
  }
  l.inter.sized = true;
}
inline uint32_t inter_completed(const std::vector<uint16_t>& arrives) {
  uint32_t least = UINT32_MAX;
  for (uint16_t a : arrives) least = a < least ? a : least;
  return least == UINT32_MAX ? 0 : least;
}
// "block 3 AIV1, block 7 AIV0, ..." for the cores of a kind that arrived fewer than `rounds` times.
inline void inter_missing(const Launch& l, int kind, const std::vector<uint16_t>& arrives, uint32_t rounds,
                          bool exited_only, char* out, size_t n) {
  size_t used = 0, listed = 0, total = 0;
  out[0] = 0;
  for (size_t i = 0; i < arrives.size(); ++i) {
    if (arrives[i] >= rounds || (exited_only && !l.inter.exited[kind][i])) continue;
    ++total;
    if (listed == 12 || used + 32 > n) continue;
    const bool mix_aiv = kind == 1 && l.kind == KernelKind::Mix;
    used += size_t(std::snprintf(out + used, n - used, "%sblock %zu %s", listed ? ", " : "", mix_aiv ? i / 2 : i,
                                 kind == 0 ? "AIC" : mix_aiv ? (i % 2 ? "AIV1" : "AIV0") : "AIV"));
    ++listed;
  }
  if (total > listed && used + 24 < n) std::snprintf(out + used, n - used, " and %zu more", total - listed);
}

// What asc_sync_inter_arrive and _wait check first: a pipe that may sync and a flag id in [0, 15].
inline void inter_check(const char* api, int pipe, int64_t flag) {
  poll();
  check_pipe(pipe, api);
  if (flag < 0 || flag > 15) fail("%s(%s, %lld): flag id outside [0, 15]", api, pipe_name(pipe), (long long)flag);
}

inline void inter_arrive(int pipe, int64_t flag) {
  inter_check("asc_sync_inter_arrive", pipe, flag);
  Core& c = core();
  Launch& l = *c.launch;
  const int kind = inter_kind(c);
  const int cores = kind == 0 ? kNumAic : kNumAiv;
  if (inter_participants(l, kind) > size_t(cores))
    fail("asc_sync_inter_arrive(%s, %lld): an all-core sync needs all %zu %s cores of the launch running at once, "
         "and the chip has %d: its rounds never complete", pipe_name(pipe), (long long)flag,
         inter_participants(l, kind), kind == 0 ? "AIC" : "AIV", cores);
  std::unique_lock<std::mutex> guard(l.inter.mu);
  inter_size(l);
  auto& arrives = l.inter.arrives[kind][flag];
  const size_t me = inter_index(c);
  arrives[me] += 1;
  const uint32_t done = inter_completed(arrives);
  for (size_t i = 0; i < arrives.size(); ++i)
    if (done > uint32_t(l.inter.waits[kind][flag][i]) + uint32_t(kIntraMax)) {
      guard.unlock();
      fail("asc_sync_inter_arrive(%s, %lld): the flag's counter of %s core %zu would exceed %d (more arrives than "
           "waits)", pipe_name(pipe), (long long)flag, kind == 0 ? "AIC" : "AIV", i, kIntraMax);
    }
  guard.unlock();
  l.inter.cv.notify_all();
  if (c.timeline) timeline_push(*c.timeline, Ev::InterArrive, pipe, kind, 0, uint32_t(flag));
}

inline void inter_wait(int pipe, int64_t flag) {
  inter_check("asc_sync_inter_wait", pipe, flag);
  Core& c = core();
  Launch& l = *c.launch;
  const int kind = inter_kind(c);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(l.wait_timeout_s);
  std::unique_lock<std::mutex> guard(l.inter.mu);
  inter_size(l);
  const size_t me = inter_index(c);
  auto& arrives = l.inter.arrives[kind][flag];
  uint16_t& waited = l.inter.waits[kind][flag][me];
  const uint32_t round = uint32_t(waited) + 1;
  char missing[512];
  while (inter_completed(arrives) < round) {
    if (l.failed.load()) {
      guard.unlock();
      poll();
    }
    inter_missing(l, kind, arrives, round, true, missing, sizeof missing);
    if (missing[0]) {
      guard.unlock();
      fail("asc_sync_inter_wait(%s, %lld): round %u of this all-core flag can never complete: %s returned without "
           "arriving on it", pipe_name(pipe), (long long)flag, round, missing);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      inter_missing(l, kind, arrives, round, false, missing, sizeof missing);
      guard.unlock();
      fail("asc_sync_inter_wait(%s, %lld): round %u did not complete within %.1f s (DJ_TWIN_WAIT_TIMEOUT); not yet "
           "arrived: %s", pipe_name(pipe), (long long)flag, round, l.wait_timeout_s, missing);
    }
    l.inter.cv.wait_for(guard, std::chrono::milliseconds(20));
  }
  waited += 1;
  guard.unlock();
  order_after_all_pipes(pipe);
  if (c.timeline) timeline_push(*c.timeline, Ev::InterWait, pipe, kind, 0, uint32_t(flag));
  c.counters.wait_ns += uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

// A core's kernel returned (or stopped): waits for its arrives can no longer be satisfied.
inline void inter_exit(Core& c) {
  Launch& l = *c.launch;
  {
    std::lock_guard<std::mutex> guard(l.inter.mu);
    inter_size(l);
    l.inter.exited[inter_kind(c)][inter_index(c)] = 1;
  }
  l.inter.cv.notify_all();
}

}  // namespace dj_twin

inline void asc_sync_inter_arrive(int pipe, int64_t flag_id) { ::dj_twin::inter_arrive(pipe, flag_id); }
inline void asc_sync_inter_wait(int pipe, int64_t flag_id) { ::dj_twin::inter_wait(pipe, flag_id); }

// Block-group and sub-block flags: not modelled; a kernel that uses one fails to compile, naming it.
namespace dj_twin {
template <class T> inline constexpr bool sync_unimplemented = false;
}  // namespace dj_twin
#define DJ_TWIN_SYNC_UNIMPLEMENTED(NAME)                                                      \
  template <class DjTwinUnimplemented = void>                                                \
  inline void NAME(...) {                                                                    \
    static_assert(::dj_twin::sync_unimplemented<DjTwinUnimplemented>,                        \
                  #NAME " is not implemented on the Ascend twin");                           \
  }
DJ_TWIN_SYNC_UNIMPLEMENTED(asc_sync_block_arrive)
DJ_TWIN_SYNC_UNIMPLEMENTED(asc_sync_block_wait)
DJ_TWIN_SYNC_UNIMPLEMENTED(asc_sync_subblock_arrive)
DJ_TWIN_SYNC_UNIMPLEMENTED(asc_sync_subblock_wait)
DJ_TWIN_SYNC_UNIMPLEMENTED(asc_sync_data_barrier)
#undef DJ_TWIN_SYNC_UNIMPLEMENTED
