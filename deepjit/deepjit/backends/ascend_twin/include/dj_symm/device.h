// dj_symm/device.h (twin) — what an Ascend kernel uses to reach its peers' symmetric windows.
//
// A window (deepjit/symm/device.py DeviceWindow) is `bytes` bytes per rank: int32 flags at
// [0, data_offset), data from data_offset. The kernel gets every rank's window base as a table
// (`bases[rank]`, an int64 tensor in its argument struct) plus its rank, the rank count and the wait
// timeout, and builds a dj_symm::Window from them. The operations follow CANN SHMEM's device API
// (hicann/shmem include/device/gm2gm/aclshmem_device_rma.h and aclshmem_device_p2p_sync.h):
//   remote(w, pe, offset)          the address of byte `offset` of pe's window   ~ aclshmem_ptr(ptr, pe)
//   signal_op(w, pe, flag, v, op)  flag `flag` of pe's window := v / += v       ~ aclshmemx_signal_op(sig, v,
//                                  (release: the data stores before it are seen first)  ACLSHMEM_SIGNAL_SET/ADD, pe)
//   signal_wait_until_ge(w, flag, v)  wait until this rank's flag >= v          ~ aclshmem_signal_wait_until(sig,
//                                                                                  ACLSHMEM_CMP_GE, v)
//   signal_wait_until_ge_for(w, flag, v, ns)  the same, bounded: whether it got there (no launch failure)
// Data moves with the ordinary GM data movers (asc_copy_ub2gm_align to remote(...)): on the twin
// check_gm covers the windows as it covers tensors (dj_twin/symm.h), so a stray access fails naming
// the window. A wait that runs past the window's timeout fails the launch naming the rank and flag
// (on an NPU aclshmem_signal_wait_until has no timeout: the device image of this header waits on the
// launch's own timeout). The NPU image of this header is deepjit/include/dj_symm/device.h.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdint>

#include "dj_twin/runtime.h"

namespace dj_symm {

enum SignalOp : int { kSignalSet = 0, kSignalAdd = 1 };  // ACLSHMEM_SIGNAL_SET / ACLSHMEM_SIGNAL_ADD

struct Window {
  __gm__ int64_t* bases;   // bases[pe]: pe's window (its first flag) as this rank addresses it
  int64_t bytes;           // window bytes per rank, flags included
  int64_t data_offset;     // flags end, data starts
  int32_t rank, num_ranks;
  int64_t timeout_ns;      // a wait longer than this fails the launch (0: the twin's DJ_TWIN_WAIT_TIMEOUT)
};

__aicore__ inline Window make_window(__gm__ int64_t* bases, int64_t bytes, int64_t data_offset, int32_t rank,
                                     int32_t num_ranks, int64_t timeout_ns) {
  return Window{bases, bytes, data_offset, rank, num_ranks, timeout_ns};
}

__aicore__ inline void check_pe(const Window& w, int32_t pe, const char* op) {
  if (pe < 0 || pe >= w.num_ranks) ::dj_twin::fail("%s: rank %d is outside the window's [0, %d)", op, pe, w.num_ranks);
}

// Byte `offset` of pe's window (flags included: offset 0 is flag 0). Not dereferenced here: the data
// mover that uses it checks the range.
__aicore__ inline __gm__ uint8_t* remote(const Window& w, int32_t pe, int64_t offset) {
  check_pe(w, pe, "dj_symm::remote");
  ::dj_twin::check_gm(w.bases + pe, sizeof(int64_t), "dj_symm::remote (window table)");
  return reinterpret_cast<__gm__ uint8_t*>(uintptr_t(w.bases[pe])) + offset;
}

__aicore__ inline __gm__ int32_t* flag_address(const Window& w, int32_t pe, int32_t flag, const char* op) {
  check_pe(w, pe, op);
  if (flag < 0 || int64_t(flag + 1) * 4 > w.data_offset)
    ::dj_twin::fail("%s: flag %d of rank %d is outside the window's %lld flags", op, flag, pe,
                    (long long)(w.data_offset / 4));
  __gm__ int32_t* p = reinterpret_cast<__gm__ int32_t*>(remote(w, pe, int64_t(flag) * 4));
  ::dj_twin::check_gm(p, 4, op);
  return p;
}

// The signal word is shared with other processes: wake the futex sleepers of the host-side waits too.
inline void wake(__gm__ int32_t* p) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(p), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// aclshmemx_signal_op: the stores this core made before it are visible before the new value.
__aicore__ inline void signal_op(const Window& w, int32_t pe, int32_t flag, int32_t value, SignalOp op) {
  __gm__ int32_t* p = flag_address(w, pe, flag, "dj_symm::signal_op");
  if (op == kSignalAdd) __atomic_fetch_add(p, value, __ATOMIC_RELEASE);
  else __atomic_store_n(p, value, __ATOMIC_RELEASE);
  wake(p);
}

inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Waits until the flag word at p reaches `value` or `limit_ns` passes: spins briefly, then sleeps on the
// word (peers' signal_op wakes it) at most 1 ms at a time, so a failure of another core of the launch stops
// it. Returns whether it was reached; `seen` is the last value read. The wait counts as the core's wait time.
__aicore__ inline bool wait_flag_ge(__gm__ int32_t* p, int32_t value, int64_t limit_ns, int32_t& seen) {
  ::dj_twin::Core& c = ::dj_twin::core();
  const int64_t start = now_ns();
  for (int64_t polls = 0;; ++polls) {
    seen = __atomic_load_n(p, __ATOMIC_ACQUIRE);
    if (seen >= value) {
      c.counters.wait_ns += uint64_t(now_ns() - start);
      ::dj_twin::order_after_all_pipes(PIPE_S);   // a peer's signal: what it follows is not tracked here
      return true;
    }
    ::dj_twin::poll();
    if (now_ns() - start > limit_ns) {
      c.counters.wait_ns += uint64_t(now_ns() - start);
      return false;
    }
    if (polls < 64) {
      sched_yield();
      continue;
    }
    const timespec nap{0, 1000000};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(p), FUTEX_WAIT, uint32_t(seen), &nap, nullptr, 0);
  }
}

// The window's wait limit: its own timeout, else the launch's.
__aicore__ inline int64_t window_timeout_ns(const Window& w) {
  return w.timeout_ns > 0 ? w.timeout_ns : int64_t(::dj_twin::core().launch->wait_timeout_s * 1e9);
}

// aclshmem_signal_wait_until(sig, ACLSHMEM_CMP_GE, value) on this rank's flag `flag`; returns the value
// seen. A flag not reached within the window's timeout fails the launch, naming the rank and the flag.
__aicore__ inline int32_t signal_wait_until_ge(const Window& w, int32_t flag, int32_t value) {
  __gm__ int32_t* p = flag_address(w, w.rank, flag, "dj_symm::signal_wait_until");
  const int64_t limit = window_timeout_ns(w);
  int32_t seen = 0;
  if (!wait_flag_ge(p, value, limit, seen))
    ::dj_twin::fail("dj_symm::signal_wait_until: rank %d waited %.3f s for flag %d of its window to reach %d "
                    "(it holds %d): a peer never signalled it", w.rank, double(limit) * 1e-9, flag, value, seen);
  return seen;
}

// signal_wait_until_ge with an outcome instead of a failure: whether this rank's flag `flag` reached `value`
// within `timeout_ns` (0: the window's timeout). For callers that recover from a silent peer themselves
// (deep_ep's low-latency shrink mode masks it); the launch goes on either way.
__aicore__ inline bool signal_wait_until_ge_for(const Window& w, int32_t flag, int32_t value, int64_t timeout_ns) {
  __gm__ int32_t* p = flag_address(w, w.rank, flag, "dj_symm::signal_wait_until_ge_for");
  int32_t seen = 0;
  return wait_flag_ge(p, value, timeout_ns > 0 ? timeout_ns : window_timeout_ns(w), seen);
}

}  // namespace dj_symm
