// dj_symm/device.h (NPU image; `npu`: compiled by bisheng only, never on this project's CI) — the same
// operations as the twin's dj_symm/device.h (backends/ascend_twin/include/dj_symm/device.h, which the
// twin finds first), on CANN SHMEM's device API (hicann/shmem, gitcode.com/cann/shmem):
//   include/device/gm2gm/aclshmem_device_rma.h       aclshmem_ptr(__gm__ void* ptr, int pe)
//   include/device/gm2gm/aclshmem_device_p2p_sync.h  aclshmem_signal_wait_until(__gm__ int32_t* sig_addr,
//                                                    int cmp, int32_t cmp_val)
//   aclshmemx_signal_op(__gm__ int32_t* sig_addr, int32_t signal, int sig_op, int pe) with
//   ACLSHMEM_SIGNAL_SET / ACLSHMEM_SIGNAL_ADD, aclshmem_quiet() (earlier puts complete before the signal).
// The window is one aclshmem_calloc allocation (a symmetric heap object: the same offset on every PE);
// the host fills bases[pe] with aclshmem_ptr(window, pe), so remote() is the table lookup on both images.
#pragma once

#include "aclshmem.h"

namespace dj_symm {

enum SignalOp : int { kSignalSet = ACLSHMEM_SIGNAL_SET, kSignalAdd = ACLSHMEM_SIGNAL_ADD };

struct Window {
  __gm__ int64_t* bases;
  int64_t bytes;
  int64_t data_offset;
  int32_t rank, num_ranks;
  int64_t timeout_ns;   // not enforced on the device: the launch timeout bounds a wait
};

__aicore__ inline Window make_window(__gm__ int64_t* bases, int64_t bytes, int64_t data_offset, int32_t rank,
                                     int32_t num_ranks, int64_t timeout_ns) {
  return Window{bases, bytes, data_offset, rank, num_ranks, timeout_ns};
}

__aicore__ inline __gm__ uint8_t* remote(const Window& w, int32_t pe, int64_t offset) {
  return reinterpret_cast<__gm__ uint8_t*>(w.bases[pe]) + offset;
}

// The symmetric address of the flag in this rank's window: aclshmemx_signal_op translates it for pe.
__aicore__ inline __gm__ int32_t* own_flag(const Window& w, int32_t flag) {
  return reinterpret_cast<__gm__ int32_t*>(w.bases[w.rank]) + flag;
}

__aicore__ inline void signal_op(const Window& w, int32_t pe, int32_t flag, int32_t value, SignalOp op) {
  aclshmem_quiet();
  aclshmemx_signal_op(own_flag(w, flag), value, int(op), pe);
}

__aicore__ inline int32_t signal_wait_until_ge(const Window& w, int32_t flag, int32_t value) {
  return aclshmem_signal_wait_until(own_flag(w, flag), ACLSHMEM_CMP_GE, value);
}

// Bounded, without failing: polls the own flag (cache line invalidated each time) against the system
// counter (50 MHz) until it reaches `value` or `timeout_ns` (0: the window's) passes; whether it got there.
// npu: not compiled on this project's CI.
__aicore__ inline bool signal_wait_until_ge_for(const Window& w, int32_t flag, int32_t value, int64_t timeout_ns) {
  __gm__ int32_t* p = own_flag(w, flag);
  const int64_t limit = (timeout_ns > 0 ? timeout_ns : w.timeout_ns) / 20;
  const int64_t start = int64_t(AscendC::GetSystemCycle());
  for (;;) {
    dcci(p, cache_line_t::SINGLE_CACHE_LINE);
    if (*reinterpret_cast<__gm__ volatile int32_t*>(p) >= value) return true;
    if (limit > 0 && int64_t(AscendC::GetSystemCycle()) - start > limit) return false;
  }
}

}  // namespace dj_symm
