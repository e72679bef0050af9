// dj_twin/symm.h — symmetric-memory windows seen by a twin launch (deepjit/symm/device.py).
//
// On an NPU a kernel reaches its peers' memory through the device symmetric heap of CANN SHMEM
// (hicann/shmem, gitcode.com/cann/shmem: aclshmem_calloc on the host, aclshmem_ptr / aclshmem_putmem /
// aclshmemx_signal_op / aclshmem_signal_wait_until on the device). On the twin every rank's window is a
// shared-memory segment (deepjit.symm.SymmetricWindow) mapped into every local rank's process, so a
// kernel of one rank reads and writes the other ranks' windows for real, in place: windows are NOT
// copied into guarded regions like tensor arguments (their peers must see the stores while the kernel
// runs). Instead each launch is told every live window's data range (dj_twin_set_symm_windows, called
// by backends/ascend_twin/kernel.py before each launch) and check_gm accepts an access that lies
// wholly inside one, and refuses one that starts or ends near a window but leaves it, naming the window.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace dj_twin {

struct SymmRegion {
  uintptr_t data = 0;   // first byte of the window's data range in this process
  size_t bytes = 0;
  char name[96] = {};   // e.g. "symm window ep of rank 1"
};

inline std::vector<SymmRegion> g_symm_regions;   // set between launches (launches are serialised)

// An access this far outside a window is still reported as that window's (an overrun names the window
// it left); farther away it is "not inside any tensor argument or symm window".
inline constexpr uintptr_t kSymmReach = 1u << 20;

// The window [p, p + bytes) belongs to, or is nearest to within kSymmReach; nullptr if none.
inline const SymmRegion* symm_region_of(uintptr_t p, size_t bytes) {
  const SymmRegion* best = nullptr;
  uintptr_t best_gap = kSymmReach;
  for (const SymmRegion& r : g_symm_regions) {
    if (p >= r.data && p < r.data + r.bytes) return &r;
    const uintptr_t end = p + bytes;
    uintptr_t gap = p >= r.data + r.bytes ? p - (r.data + r.bytes) : (end <= r.data ? r.data - end : 0);
    if (gap < best_gap || (gap == 0 && best == nullptr)) {
      best_gap = gap;
      best = &r;
    }
  }
  return best;
}

}  // namespace dj_twin
