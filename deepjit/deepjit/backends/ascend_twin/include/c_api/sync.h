// c_api/sync.h — AscendC synchronisation on the twin (docs/zh/api/SIMD-API/C-API/sync/*.md).
//
// Within a core (one thread, program order), pipe flags and mutexes cannot order anything, so they
// are checked for discipline:
//   asc_sync_notify(src, dst, id) / asc_sync_wait(src, dst, id): a wait consumes one earlier notify
//     of the same (src, dst, id); a wait with none pending can never be satisfied and is reported at
//     once; notifies still pending at kernel end are reported.
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

inline void sync_notify(int src, int dst, int id) {
  poll();
  check_pipe(src, "asc_sync_notify");
  check_pipe(dst, "asc_sync_notify");
  if (id < 0 || id >= kNumEvents) fail("asc_sync_notify(%s, %s, %d): event id outside [0, %d)", pipe_name(src),
                                       pipe_name(dst), id, kNumEvents);
  core().flags[src][dst][id] += 1;
}

inline void sync_wait(int src, int dst, int id) {
  poll();
  check_pipe(src, "asc_sync_wait");
  check_pipe(dst, "asc_sync_wait");
  if (id < 0 || id >= kNumEvents) fail("asc_sync_wait(%s, %s, %d): event id outside [0, %d)", pipe_name(src),
                                       pipe_name(dst), id, kNumEvents);
  uint16_t& pending = core().flags[src][dst][id];
  if (pending == 0)
    fail("asc_sync_wait(%s, %s, event %d): no asc_sync_notify of this flag precedes it on this core, so the "
         "wait can never be satisfied", pipe_name(src), pipe_name(dst), id);
  pending -= 1;
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
  c.counters.wait_ns += uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

// Called when a core's kernel function returns: pending flags and held locks are errors.
inline void check_sync_at_exit() {
  Core& c = core();
  for (int s = 0; s < kNumPipes; ++s)
    for (int d = 0; d < kNumPipes; ++d)
      for (int e = 0; e < kNumEvents; ++e)
        if (c.flags[s][d][e])
          fail("kernel end: asc_sync_notify(%s, %s, event %d) was set %d time(s) more than it was waited on",
               pipe_name(s), pipe_name(d), e, c.flags[s][d][e]);
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

// Ordering within one pipe / all pipes: already given by program order.
inline void asc_sync_pipe(pipe_t) { ::dj_twin::poll(); }
inline void asc_sync() { ::dj_twin::poll(); }
inline void asc_sync_vec() { ::dj_twin::poll(); }
inline void asc_sync_mte2(int) { ::dj_twin::poll(); }
inline void asc_sync_mte3(int) { ::dj_twin::poll(); }

// Cross-block flags: the docs do not pin down which cores a group's arrive reaches, so they are not
// modelled; a kernel that uses one fails to compile, naming it.
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
DJ_TWIN_SYNC_UNIMPLEMENTED(asc_sync_inter_arrive)
DJ_TWIN_SYNC_UNIMPLEMENTED(asc_sync_inter_wait)
DJ_TWIN_SYNC_UNIMPLEMENTED(asc_sync_subblock_arrive)
DJ_TWIN_SYNC_UNIMPLEMENTED(asc_sync_subblock_wait)
DJ_TWIN_SYNC_UNIMPLEMENTED(asc_sync_data_barrier)
#undef DJ_TWIN_SYNC_UNIMPLEMENTED
